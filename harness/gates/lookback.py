"""Pure: one run's figure against the same figure in the last K comparable runs (no I/O), the
history gate's test.

The test, and why. CI adds one run per commit; the independent unit on a shared machine is a run,
not a repeat inside it (docs/ci-gate.md: a run's CPU per sample moves with the load of its
minutes), so the question is whether ONE new value belongs to the distribution of K earlier ones.
Of the three tools' tests:

- asv's Mann-Whitney plus a minimum factor compares two samples of several values each; one new run
  against K = 10 can reach at best p = 2 / 11 = 0.18 (two-sided), so it can never fail;
- conbench's lookback z-score, (x - mean) / sd of the lookback runs against a fixed threshold, asks
  the right question, but treats the sd of K runs as known: with K = 5 a z threshold of 3 is
  crossed by same-code runs far more often than its normal tail says;
- pyperf's t-test plus a minimum difference keeps the t distribution's small-sample correction.

So: conbench's question with pyperf's correction, on the log of the figure (CPU per sample and
throughput are ratios: a change is a factor): the Student-t prediction interval of one new
observation, t = (log x - mean) / (sd * sqrt(1 + 1/K)) with K - 1 degrees of freedom (exact for
normal log values), and a minimum factor as asv's: a cell is "slower" only when t is beyond the
one-sided critical value at `alpha` AND the ratio x / geometric mean is beyond 1 + min_effect in
the worse direction. The history's outliers (a run under heavy load) widen sd: the gate then misses
more, it does not alarm more.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from harness.results import stats

MIN_RUNS = 3  # fewer comparable runs than this: no verdict (2 degrees of freedom at least)


@dataclass(frozen=True)
class LookbackResult:
    """One figure's new value against its history: the ratio to the history's geometric mean, the t
    statistic (positive: worse), the critical value, the band a same-code run falls in at that
    level, the verdict."""

    ratio: float | None
    t: float | None
    critical: float | None
    band: tuple[float, float] | None  # ratios [low, high] of the prediction interval
    runs: int
    verdict: str  # "slower", "faster", "unchanged", "inconclusive"


def lookback(history: list[float], value: float, alpha: float, min_effect: float,
             lower_is_better: bool) -> LookbackResult:
    """`value` (one run's figure) against `history` (the same figure, one value per earlier run);
    positive values. "inconclusive" with fewer than MIN_RUNS values or none that spread."""
    logs = [math.log(h) for h in history if h and h > 0]
    k = len(logs)
    if not value or value <= 0 or k < MIN_RUNS:
        ratio = value / math.exp(sum(logs) / k) if k and value and value > 0 else None
        return LookbackResult(ratio, None, None, None, k, "inconclusive")
    mean = sum(logs) / k
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (k - 1))
    ratio = math.exp(math.log(value) - mean)
    critical = stats.t_quantile(1 - 2 * alpha, k - 1)  # one-sided at alpha
    scale = sd * math.sqrt(1 + 1 / k)
    band = (math.exp(-critical * scale), math.exp(critical * scale))
    if scale == 0:
        return LookbackResult(ratio, None, critical, band, k, "inconclusive")
    worse = 1 if lower_is_better else -1
    t = worse * (math.log(value) - mean) / scale
    bad_ratio = ratio if lower_is_better else 1 / ratio  # > 1: worse
    if t > critical and bad_ratio >= 1 + min_effect:
        verdict = "slower"
    elif -t > critical and 1 / bad_ratio >= 1 + min_effect:
        verdict = "faster"
    else:
        verdict = "unchanged"
    return LookbackResult(ratio, t, critical, band, k, verdict)
