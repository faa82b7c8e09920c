"""Pure: does an effect depend on the machine's outside load? The effects fit
(harness.analysis.effects) with one more term per level: the level's indicator times the visit's
outside load (figures.other_cpu_pct, as a share of the host). Every measured visit is used,
disturbed ones included: they are what the question is about.

    log figure = levels + passes + h * load / 100
                 + sum over levels of  g_level * [cell has level] * load / 100

h takes what the load does to every cell alike (a visit disturbed within a pass); exp(g) is the
factor by which the level's effect changes from a quiet machine (0%) to a fully loaded one (100%):
the level's effect at load L is exp(b + g L / 100). An effect depends on the load when g's interval
(at the fit's confidence, Bonferroni over the levels tested) excludes 0, within the range of loads
the run saw. Where the loads spread less than MIN_LOAD_SPREAD_PCT, or g is not estimable, nothing
is said.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from harness.analysis.effects import CONFIDENCE, Observation, design_matrix, least_squares, observed_order
from harness.results import stats
from harness.results.cellresult import CellResult

MIN_LOAD_SPREAD_PCT = 10.0  # loads spread less than this across the visits: nothing to compare


@dataclass(frozen=True)
class LoadDependence:
    axis: str
    level: str
    reference: str
    quiet: float  # the level's effect at 0% outside load (a ratio)
    loaded: float  # at `load_pct`
    load_pct: float  # the highest outside load the run's visits saw
    low: float  # the interval of the change factor exp(g * load_pct / 100)
    high: float

    def line(self) -> str:
        return (f"  {self.axis}={self.level} vs {self.reference} depends on the machine's load: "
                f"x{self.quiet:.2f} quiet, x{self.loaded:.2f} at {self.load_pct:.0f}% outside load (change "
                f"x{self.loaded / self.quiet:.2f} [{self.low:.2f}, {self.high:.2f}]); decide it on a machine loaded "
                "as the one you will roll out on")


def _rows(results: list[CellResult], attribute: str):
    usable = [r for r in results if r.measured and getattr(r.figures, attribute) and r.figures.other_cpu_pct
              is not None and math.isfinite(getattr(r.figures, attribute))]
    return usable, [float(r.figures.other_cpu_pct) for r in usable]


def load_dependence(results: list[CellResult], order: dict[str, list[str]], attribute: str = "throughput",
                    confidence: float = CONFIDENCE) -> list[LoadDependence]:
    """The levels whose effect on `attribute` changes with the visits' outside load (none when the
    loads were too alike to tell)."""
    usable, loads = _rows(results, attribute)
    if not usable or max(loads) - min(loads) < MIN_LOAD_SPREAD_PCT:
        return []
    obs = [Observation(dict(r.strategies), getattr(r.figures, attribute), r.repeat) for r in usable]
    order = observed_order(obs, order)
    x, columns = design_matrix(obs, order, [])
    levels = [(a, lv, lvs[0]) for a, lvs in order.items() for lv in lvs[1:]]
    extra = np.array([[float(o.levels.get(a) == lv) * load / 100 for a, lv, _ in levels] + [load / 100]
                      for o, load in zip(obs, loads)])
    coef, se, df = least_squares(np.hstack([x, extra]), np.log([o.value for o in obs]))
    if df <= 0 or not levels:
        return []
    t = stats.t_quantile(1 - (1 - confidence) / len(levels), df)
    top = max(loads)
    out = []
    for k, (axis, level, reference) in enumerate(levels):
        b, g, s = coef[columns.index(("level", axis, level))], coef[x.shape[1] + k], se[x.shape[1] + k]
        if not math.isfinite(s) or abs(g) <= t * s:
            continue
        scale = top / 100
        out.append(LoadDependence(axis, level, reference, math.exp(b), math.exp(b + g * scale), top,
                                  math.exp((g - t * s) * scale), math.exp((g + t * s) * scale)))
    return out
