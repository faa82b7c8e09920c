"""The capacity figure checked here (MLPerf Storage's measure: how many accelerators this host
keeps at AU >= 90%), where prediction and measurement can disagree: per workload (pixels,
features), calibrations at 1 and 2 ranks and runs at 1, 2 and 4 ranks, each a real launch of the
harness's cells (raw storage, the scenario's workers). The model predicts each size's AU from the
1-rank calibration's costs on the run's CPUs (its allowance) and, from 2 ranks on, the ranks' wait
for each other that the 2-rank calibration measured, carried to the size by
harness.analysis.rankwait's laws (nothing fitted to a measured case: the calibrations are launches
of their own, and a size a calibration ran at is a repeat of it, so marked). Beside it, labelled:
the model without the ranks' wait (the 1-rank costs alone) and the shared-host correction less the
outside load measured in that launch. The check compares the predicted and measured AU at every
size, within the AU's noise on this host (the sd between a calibration and its repeat, pooled, at
most NOISE_LIMIT so that one outlying repeat cannot widen it; under MIN_POINTS no difference
counts), and the capacities where both sides are clear of the 90% line: it fails (exit 1) where
they differ; a size on the line is undecided (exit 4), never agreement. `scenarios/capacity.toml`
defines an accelerator slow enough that the 2-core development host feeds one or two and not four;
on a scenario whose accelerator this host feeds at no size (or at every size) the check says that
it cannot tell. The command writes
capacity.jsonl and prints the table; docs/measurements/prediction.md has measured ones. The
calibrations cost two launches per workload.

This module is the model's prediction per size and the verdict, pure (from the launches' lines);
the command, which launches, is capacity_command.py, the table capacity_table.py.

    python run_bench.py check-capacity --scenario capacity [--steps 40]
"""
from __future__ import annotations

import math
import shlex
import sys
from dataclasses import dataclass, field

from harness.analysis import rankwait, stages
from harness.analysis.checkcases import Bench, CheckCase, RanksWait, predict_case
from harness.analysis.targetmodel import AU_TARGET_PCT, Costs
from harness.checks.predictions.cases import measured_at
from harness.errors import EXIT_INCONCLUSIVE, EXIT_OK, EXIT_REGRESSION, EXIT_USAGE
from harness.measure.hostload import OUTSIDE_LOAD_PCT

SIZES = (1, 2, 4)
CALIBRATED = (1, 2)  # the calibrations' rank counts: the costs at 1, the ranks' wait at 2
NO_BENCH = Bench({}, {}, {})  # the cases change only the ranks: no side measurement scales a cost
Z = 1.96  # a size's AUs differ, or an AU is off the line, beyond Z sd of a launch's noise (95%, two-sided)
NOISE_LIMIT = 2.5  # points: the most AU sd between a launch and its repeat the comparison takes as noise
# points: the least AU difference that is a disagreement. The pooled sd rests on two pairs and can come out far
# under a launch's real noise (0.1 points on 2026-12-06, when the model missed its own 1-rank calibration by 0.6)
MIN_POINTS = 2.0
AGREE, DISAGREE, UNDECIDED, INCONCLUSIVE = "agree", "disagree", "undecided", "inconclusive"
FED, NOT_FED, AT_LINE = "fed", "not fed", "at the line"


def calibration_costs(visit, workload: str, cores: int):
    """The 1-rank launch's costs, with the share of the CPUs its own CPU and the outside load kept
    busy."""
    f = visit.line.figures
    return measured_at(stages.costs(visit.line.ranks, f, workload), float(f.get("throughput") or 0), cores,
                       float(f.get("other_cpu_pct") or 0))


def launch_row(workload: str, case: CheckCase, visit, model: Model, base: CheckCase, sc, cores: int) -> dict:
    """The launch's measured AU and samples/s beside the model's (with the ranks' wait; without it;
    less the outside load)."""
    f = visit.line.figures
    outside = float(f.get("other_cpu_pct") or 0.0)
    alone = predict_case(model.calib, base, case, NO_BENCH, sc.accelerator, cores)
    p = model.predict(base, case, sc, cores)
    shared = model.predict(base, case, sc, cores, outside)
    return {"workload": workload, "world_size": case.world_size, "other_cpu_pct": round(outside, 1),
            "predicted_au_pct": round(p.au_pct, 1), "predicted_alone_au_pct": round(alone.au_pct, 1),
            "predicted_shared_au_pct": round(shared.au_pct, 1),
            "measured_au_pct": round(float(f.get("au_pct") or 0), 1), "predicted": round(p.samples_per_s, 1),
            "measured": round(float(f.get("throughput") or 0), 1), "binds": p.binds,
            "repeat": case.world_size in CALIBRATED, "calibration_au_pct": model.calibration_au.get(case.world_size)}


@dataclass(frozen=True)
class Model:
    """The 1-rank calibration's costs and the 2-rank calibration's ranks' wait (None: not
    measured)."""

    calib: Costs  # the 1-rank calibration's
    wait: rankwait.RankWait | None
    samples: int  # the dataset's samples per epoch (the epoch starts' law)
    calibration_au: dict[int, float] = field(default_factory=dict)  # ranks -> the calibration's measured AU %

    def predict(self, base: CheckCase, case: CheckCase, sc, cores: int, outside: float | None = None):
        """The size's prediction: the CPU bounds with the rank's CPU at that size, and the step no
        shorter than the ranks' wait makes it (the AU the smaller of the two;
        checkcases.predict_case)."""
        ranks = RanksWait(self.wait, self.samples) if self.wait is not None else None
        return predict_case(self.calib, base, case, NO_BENCH, sc.accelerator, cores, outside, ranks)


def fed(rows: list[dict], key: str, target: float = AU_TARGET_PCT) -> int:
    """The largest size whose AU (`key`) is at least the target, every smaller size too (0: not
    even 1)."""
    best = 0
    for row in sorted(rows, key=lambda r: r["world_size"]):
        if row[key] < target:
            break
        best = row["world_size"]
    return best


def noise(rows: list[dict]) -> float:
    """The AU's sd between a launch and its repeat on this host, in points: pooled over the sizes
    that ran twice (a calibration and its repeat, sizes 1 and 2: each pair's difference d gives d^2
    / 2), at most NOISE_LIMIT (an outlying repeat cannot widen the comparison past it; `noisy` says
    when it was cut); 0 where the rows do not say (the comparison is then exact)."""
    return min(_pooled(rows), NOISE_LIMIT)


def _pooled(rows: list[dict]) -> float:
    pairs = [r["measured_au_pct"] - r["calibration_au_pct"] for r in rows if r.get("calibration_au_pct") is not None]
    return math.sqrt(sum(d * d for d in pairs) / (2 * len(pairs))) if pairs else 0.0


def noisy(rows: list[dict]) -> bool:
    """The repeats disagree by more than the check accepts (their pooled sd above NOISE_LIMIT)."""
    return _pooled(rows) > NOISE_LIMIT


def side(au: float, sd: float) -> str:
    """One side's AU at a size against the 90% line: FED or NOT_FED where it is clear of the line
    by Z of its sd, else AT_LINE."""
    if au >= AU_TARGET_PCT + Z * sd:
        return FED
    return NOT_FED if au <= AU_TARGET_PCT - Z * sd else AT_LINE


def decided_capacity(rows: list[dict], key: str, sd: float) -> int | None:
    """The largest size clearly fed with every smaller one; None where a size on the line comes
    first."""
    best = 0
    for row in sorted(rows, key=lambda r: r["world_size"]):
        state = side(row[key], sd)
        if state == AT_LINE:
            return None
        if state == NOT_FED:
            break
        best = row["world_size"]
    return best


def tolerance(sd: float) -> float:
    """The AU difference (points) beyond which a size's prediction and measurement disagree: Z x
    sqrt(2) x sd (both sides carry a launch's noise), at least MIN_POINTS."""
    return max(Z * math.sqrt(2) * sd, MIN_POINTS)


def misses(rows: list[dict], sd: float) -> list[dict]:
    """The sizes whose predicted AU differs from the measured one by more than the tolerance."""
    return [r for r in rows if abs(r["predicted_au_pct"] - r["measured_au_pct"]) > tolerance(sd) + 1e-9]


def verdict(rows: list[dict]) -> tuple[str, str]:
    """One workload's line and its state: AGREE, DISAGREE, UNDECIDED or INCONCLUSIVE. Prediction
    and measurement are compared at every size (`misses`); the capacities only where each side's
    AUs are clear of the 90% line: a size on the line decides nothing and is never agreement. A
    disagreement while a launch ran under outside load above OUTSIDE_LOAD_PCT is INCONCLUSIVE (the
    load, not the model)."""
    wl, sd = rows[0]["workload"], noise(rows)
    predicted, measured = (decided_capacity(rows, k, sd) for k in ("predicted_au_pct", "measured_au_pct"))
    head = (f"{wl}: kept at AU >= {AU_TARGET_PCT:.0f}% among {', '.join(str(r['world_size']) for r in rows)} "
            f"ranks: predicted {_cap(predicted)}, measured {_cap(measured)}: ")
    missed = misses(rows, sd)
    tol = (f"{tolerance(sd):.1f} points (noise sd {sd:.1f}{', cut to the limit' if noisy(rows) else ''}"
           f"{f'; at least {MIN_POINTS:g}' if tolerance(sd) == MIN_POINTS else ''})")
    if missed or (None not in (predicted, measured) and predicted != measured):
        said = "DISAGREE" + "".join(f"; at {r['world_size']} rank(s) AU {r['predicted_au_pct']:.1f} predicted, "
                                    f"{r['measured_au_pct']:.1f} measured" for r in missed) + f" (beyond {tol})"
        if inconclusive(rows):
            loaded = [r["other_cpu_pct"] for r in rows if r["other_cpu_pct"] > OUTSIDE_LOAD_PCT]
            return (head + f"inconclusive: outside load {max(loaded):.0f}% in {len(loaded)} of {len(rows)} "
                    f"launches (measure again on a quieter machine); {said}"), INCONCLUSIVE
        return head + said, DISAGREE
    if None in (predicted, measured):
        at = [r["world_size"] for r in rows if AT_LINE in (side(r["predicted_au_pct"], sd),
                                                           side(r["measured_au_pct"], sd))]
        return (head + f"undecided: the AU at {', '.join(map(str, at))} rank(s) is within {Z:.2f} noise sd "
                f"({sd:.1f} points) of the line; every size agrees within {tol}"), UNDECIDED
    if noisy(rows):
        return (head + f"inconclusive: a calibration and its repeat differed by more than the check accepts "
                f"(pooled sd {_pooled(rows):.1f} points, limit {NOISE_LIMIT:.1f}); measure again"), INCONCLUSIVE
    said = f"agree (every size within {tol})"
    if measured in (0, SIZES[-1]):
        said += (f" (but this host feeds {'none' if measured == 0 else 'all'} of the sizes: the check cannot "
                 "tell a model that over- or under-predicts here; give a scenario whose accelerator this host "
                 "feeds at some sizes and not others, e.g. scenarios/capacity.toml)")
    return head + said, AGREE


def _cap(capacity: int | None) -> str:
    return "undecided" if capacity is None else str(capacity)


def inconclusive(rows: list[dict]) -> bool:
    """A workload's launches of which one ran under outside load: its disagreement is not the
    model's."""
    return any(r["other_cpu_pct"] > OUTSIDE_LOAD_PCT for r in rows)


def exit_code(states: list[str]) -> int:
    """One state per workload: 1 for a disagreement on a quiet machine, else 4 where one is
    undecided or inconclusive, else 0."""
    if DISAGREE in states:
        return EXIT_REGRESSION
    return EXIT_OK if all(s == AGREE for s in states) else EXIT_INCONCLUSIVE


if __name__ == "__main__":
    print("python -m harness.checks.predictions.capacity is now: python run_bench.py check-capacity "
          f"{shlex.join(sys.argv[1:])}".rstrip(), file=sys.stderr)
    sys.exit(EXIT_USAGE)
