"""Pure: a prediction's interval for a target (ROLL OUT): the visits' spread and the model's own
error as check-predictions measures it (issue 38; docs/prediction.md, "How far to trust a
prediction"). The check's own intervals and their coverage are
harness.checks.predictions.interval's."""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from harness.results.stats import t_quantile

LEVEL = 0.90  # the stated intervals' nominal coverage
# The model's own error in log samples/s (sd), as check-predictions measures it on a quiet host: the RMS of
# log(predicted / measured) over its distinct scored measurements (docs/measurements/prediction.md has the
# run: 2026-12-06, 2-core AMD EPYC host, outside load 0.3% median, 14 distinct measurements). A prediction
# for a target (ROLL OUT) carries it beside its visits' spread (target_interval).
MODEL_ERROR_SD = 0.084
MODEL_ERROR_DF = 13  # the distinct measurements behind it, less one


def log_sd(values) -> float:
    """The sd of log of the positive values (0 with fewer than 2)."""
    logs = [math.log(v) for v in values if v and v > 0]
    return statistics.stdev(logs) if len(logs) > 1 else 0.0


@dataclass(frozen=True)
class TargetInterval:
    """A prediction for a target from each visit's costs: the median, its LEVEL interval, and what
    it holds."""

    middle: float
    low: float
    high: float
    visits: int
    spread_sd: float  # the visits' predictions' log sd (0 with one visit)


def target_interval(values: list[float], level: float = LEVEL, model_sd: float = MODEL_ERROR_SD) -> TargetInterval:
    """The visits' median with a prediction interval: the visits' spread (the sd of their log
    predictions over the square root of their count) and the model's own error (`model_sd`, as
    check-predictions measured it), added in variance; t with the model error's df and the visits'
    together."""
    n = len(values)
    middle = statistics.median(values)
    spread = log_sd(values)
    h = t_quantile(level, MODEL_ERROR_DF + max(0, n - 1)) * math.sqrt(spread ** 2 / n + model_sd ** 2)
    return TargetInterval(middle, middle * math.exp(-h), middle * math.exp(h), n, spread)
