"""Pure: a prediction's interval, propagated from the calibration's own spread, and the coverage the check
measures (issue 38; docs/prediction.md, "How far to trust a prediction").

A prediction turns the calibration's measured costs into samples/s; the measurement it is checked against is
the mean of the case's visits. Both carry noise the calibration can see, each taken as a spread of log
samples/s (so the interval is a ratio, the same on both sides in log):

    costs     the prediction made from each calibration visit's costs alone (every cost of one visit
              together, through the model's bounds): var / visits of the calibration
    load      the prediction at each of the case's visits' outside load (the headline takes their mean):
              var / the case's visits
    noise     one visit's samples/s spread on this host, pooled over the calibrations' visits (what a
              measured mean of the case's visits will scatter by): noise^2 / the case's visits

    half-width = t(level, df) x sqrt(the sum),  df = the calibrations' visits less one each (pooled)

Nothing in it comes from the case's measured samples/s: the case's visits give only their count and their
outside load. What it does not hold is the model's own error (a bound it does not have, a cost it holds that
the case changes); coverage below the level says how much of that there is, and the table says so.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from harness.results.stats import t_quantile

LEVEL = 0.90  # the stated intervals' nominal coverage
FAR_BELOW = 0.10  # coverage this far below LEVEL is called out
# The model's own error in log samples/s (sd), as check-predictions measures it on a quiet host: the RMS of
# log(predicted / measured) over its scored cases (docs/measurements/prediction.md has the runs). A
# prediction for a target (ROLL OUT) carries it beside its visits' spread (target_interval).
MODEL_ERROR_SD = 0.03
MODEL_ERROR_DF = 16  # the distinct measurements behind it, less one


@dataclass(frozen=True)
class Spread:
    """What one prediction's interval is built from (module docstring); each list holds predictions in
    samples/s, made the one way with one input changed."""

    costs: tuple[float, ...]  # from each calibration visit's costs alone
    load: tuple[float, ...]  # at each of the case's visits' outside load
    noise_sd: float  # one visit's log samples/s sd, pooled over the calibrations
    noise_df: int  # its degrees of freedom
    visits: int  # the case's visits


def log_sd(values) -> float:
    """The sd of log of the positive values (0 with fewer than 2)."""
    logs = [math.log(v) for v in values if v and v > 0]
    return statistics.stdev(logs) if len(logs) > 1 else 0.0


def pooled_sd(groups) -> tuple[float, int]:
    """The pooled sd of log over groups of samples/s (each group: one calibration's visits), and its df."""
    ss, df = 0.0, 0
    for values in groups:
        logs = [math.log(v) for v in values if v and v > 0]
        if len(logs) > 1:
            mean = statistics.mean(logs)
            ss += sum((x - mean) ** 2 for x in logs)
            df += len(logs) - 1
    return (math.sqrt(ss / df) if df else 0.0), df


def _term(values: tuple[float, ...]) -> float:
    return log_sd(values) ** 2 / len(values) if len(values) > 1 else 0.0


def half_width(spread: Spread, level: float = LEVEL) -> float | None:
    """The interval's half-width in log samples/s; None where no spread was measured (no df)."""
    if spread.noise_df < 1:
        return None
    var = _term(spread.costs) + _term(spread.load) + spread.noise_sd ** 2 / max(1, spread.visits)
    return t_quantile(level, spread.noise_df) * math.sqrt(var)


def interval(predicted: float, spread: Spread, level: float = LEVEL) -> tuple[float, float] | None:
    """(low, high) samples/s around the prediction; None without a measured spread."""
    h = half_width(spread, level)
    return None if h is None else (predicted * math.exp(-h), predicted * math.exp(h))


def coverage(rows: list[dict]) -> tuple[int, int]:
    """(inside, stated): the scored rows with an interval, and those whose measurement fell inside it."""
    stated = [r for r in rows if r.get("scored") and r.get("interval")]
    return sum(bool(r.get("inside")) for r in stated), len(stated)


def coverage_line(rows: list[dict], level: float = LEVEL) -> str | None:
    """One line: the share of the scored cases measured inside their stated interval, against the level."""
    inside, stated = coverage(rows)
    if not stated:
        return None
    share = inside / stated
    verdict = (f"far below the nominal {level:.0%}: the intervals hold the calibration's noise, not the model's "
               "own errors" if share < level - FAR_BELOW else f"near the nominal {level:.0%}")
    return (f"measured inside the stated {level:.0%} intervals: {inside} of {stated} scored cases "
            f"({share:.0%}; {verdict})")


@dataclass(frozen=True)
class TargetInterval:
    """A prediction for a target from each visit's costs: the median, its LEVEL interval, and what it holds."""

    middle: float
    low: float
    high: float
    visits: int
    spread_sd: float  # the visits' predictions' log sd (0 with one visit)


def target_interval(values: list[float], level: float = LEVEL, model_sd: float = MODEL_ERROR_SD) -> TargetInterval:
    """The visits' median with a prediction interval: the visits' spread (the sd of their log predictions
    over the square root of their count) and the model's own error (`model_sd`, as check-predictions
    measured it), added in variance; t with the model error's df and the visits' together."""
    n = len(values)
    middle = statistics.median(values)
    spread = log_sd(values)
    h = t_quantile(level, MODEL_ERROR_DF + max(0, n - 1)) * math.sqrt(spread ** 2 / n + model_sd ** 2)
    return TargetInterval(middle, middle * math.exp(-h), middle * math.exp(h), n, spread)
