"""Pure: a prediction's interval, propagated from the calibration's own spread, and the coverage
the check measures (issue 38; docs/prediction.md, "How far to trust a prediction").

A prediction turns the calibration's measured costs into samples/s; the measurement it is checked
against is the mean of the case's visits. Both carry noise the calibration can see, each taken as a
spread of log samples/s (so the interval is a ratio, the same on both sides in log):

    costs     the prediction made from each calibration visit's costs alone (every cost of
              one visit together, through the model's bounds): var / visits of the calibration
    load      the prediction at each of the case's visits' outside load (the headline takes
              their mean): var / the case's visits
    noise     one visit's samples/s spread on this host, over the visits of every other case
              (what a measured mean of the case's visits will scatter by): noise^2 / the
              case's visits. Robust: the median of the cases' own sds, each scaled to the sd it
              estimates (`robust_sd`), so a case whose visits met a neighbour's burst does not
              set every interval's width (pooled as a mean of squares, two such cases of 18
              made the noise 0.137 against a median-based 0.053)

    half-width = t(level, df) x sqrt(the sum),  df = the noise's effective df (`robust_sd`)

Nothing in it comes from the case's measured samples/s: the case's visits give only their count and
their outside load (its noise is taken over the others, leaving its own out). What it does not hold
is the model's own error (a bound it does not have, a cost it holds that the case changes);
coverage below the level says how much of that there is, and the table says so (coverage_line
checks it both ways). """
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from harness.analysis.predictioninterval import LEVEL, log_sd
from harness.results.stats import binomial_tails, t_quantile

# the count inside is judged by a binomial test at the level, each side at this: fixed shares (75%-97% before)
# called every case inside "too wide", which calibrated 90% intervals give 0.9^14 = 23% of the time over 14
# measurements; at fewer than 29 cases the count cannot show intervals too wide, only their width can
COVERAGE_ALPHA = 0.05
# the median of a normal error's size is 0.674 sd, a 90% half-width 1.645 sd: calibrated intervals have a
# median half-width 2.44 times the median |error| (width_per_error); WIDTH_SLACK times that is "covered by
# width" (the median of 14 errors is itself uncertain by about a quarter)
WIDTH_SLACK = 1.5
MEDIAN_PER_SD = statistics.NormalDist().inv_cdf(0.75)  # the median |x| of a normal x, in sd (0.674)
MAD_EFFICIENCY = 0.37  # a median-based sd's variance is that of a plain sd over 37% as many df (normal)


@dataclass(frozen=True)
class Spread:
    """What one prediction's interval is built from (module docstring); each list holds predictions
    in samples/s, made the one way with one input changed."""

    costs: tuple[float, ...]  # from each calibration visit's costs alone
    load: tuple[float, ...]  # at each of the case's visits' outside load
    noise_sd: float  # one visit's log samples/s sd, over the other cases' visits (robust_sd)
    noise_df: int  # its degrees of freedom
    visits: int  # the case's visits


def robust_sd(groups) -> tuple[float, int]:
    """One visit's sd of log samples/s over groups (each group: one case's visits), robust to a few
    groups that met a burst: the median over groups of each group's sd divided by the median of
    what that sd is for a unit normal (sqrt(chi2 median / df)), and its effective df (the pooled df
    x MAD_EFFICIENCY, at least 1). (0.0, 0) without a group of two."""
    scaled, df = [], 0
    for values in groups:
        logs = _logs(values)
        if len(logs) > 1:
            k = len(logs) - 1
            scaled.append(statistics.stdev(logs) / math.sqrt(_chi2_median(k) / k))
            df += k
    if not scaled:
        return 0.0, 0
    return statistics.median(scaled), max(1, round(df * MAD_EFFICIENCY))


def _chi2_median(df: int) -> float:
    """The median of chi-squared with df degrees of freedom (exact for 1, Wilson-Hilferty
    above)."""
    return 0.454936 if df == 1 else df * (1 - 2 / (9 * df)) ** 3


def _logs(values) -> list[float]:
    return [math.log(v) for v in values if v and v > 0]


def width_per_error(level: float = LEVEL) -> float:
    """A calibrated interval's median half-width over the median |error| (normal errors): z((1 +
    level) / 2) / z(0.75), 2.44 at 90%."""
    return statistics.NormalDist().inv_cdf((1 + level) / 2) / MEDIAN_PER_SD


def _term(values: tuple[float, ...]) -> float:
    return log_sd(values) ** 2 / len(values) if len(values) > 1 else 0.0


def noise_sd(spread: Spread) -> float:
    """The sd of log(predicted / measured) that the noise alone makes (the three terms of the
    module docstring, added in variance): what a model without error would still miss by."""
    return math.sqrt(_term(spread.costs) + _term(spread.load) + spread.noise_sd ** 2 / max(1, spread.visits))


def half_width(spread: Spread, level: float = LEVEL) -> float | None:
    """The interval's half-width in log samples/s; None where no spread was measured (no df)."""
    if spread.noise_df < 1:
        return None
    return t_quantile(level, spread.noise_df) * noise_sd(spread)


def interval(predicted: float, spread: Spread, level: float = LEVEL) -> tuple[float, float] | None:
    """(low, high) samples/s around the prediction; None without a measured spread."""
    h = half_width(spread, level)
    return None if h is None else (predicted * math.exp(-h), predicted * math.exp(h))


def coverage(rows: list[dict]) -> tuple[int, int]:
    """(inside, stated): the scored rows with an interval, and those whose measurement fell inside
    it."""
    stated = [r for r in rows if r.get("scored") and r.get("interval")]
    return sum(bool(r.get("inside")) for r in stated), len(stated)


def distinct(rows: list[dict]) -> int:
    """The distinct measurements behind the scored rows: several rows predict the same measured
    case from different calibrations (`case`; `config` where a row does not say)."""
    return len({r.get("case") or r["config"] for r in rows if r.get("scored")})


def half_width_pct(row: dict) -> float:
    """A row's interval half-width, % (in log: half of log(high / low))."""
    low, high = row["interval"]
    return 100.0 * math.log(high / low) / 2 if low > 0 else math.inf


def model_error_sd(rows: list[dict]) -> float | None:
    """The RMS of log(predicted / measured) over the distinct scored measurements (one per case:
    its rows' mean): what MODEL_ERROR_SD states; None without a scored row."""
    per_case: dict[str, list[float]] = {}
    for r in rows:
        if r.get("scored") and r.get("predicted_shared") and r.get("measured"):
            error = math.log(r["predicted_shared"] / r["measured"])
            per_case.setdefault(r.get("case") or r["config"], []).append(error)
    errors = [statistics.mean(v) for v in per_case.values()]
    return math.sqrt(statistics.mean(e * e for e in errors)) if errors else None


def noise_floor_pct(rows: list[dict]) -> float | None:
    """The median |error| (%) a model without error would show over the scored rows: the median
    of their noise sds (`noise_pct`, noise_sd in %) x MEDIAN_PER_SD; None where no row has one."""
    sds = [r["noise_pct"] for r in rows if r.get("scored") and r.get("noise_pct") is not None]
    return MEDIAN_PER_SD * statistics.median(sds) if sds else None


def coverage_range(n: int, level: float = LEVEL) -> tuple[int, int]:
    """The counts inside, of n, that the binomial test at COVERAGE_ALPHA a side accepts."""
    ok = [k for k in range(n + 1) if min(binomial_tails(k, n, level)) >= COVERAGE_ALPHA]
    return (ok[0], ok[-1]) if ok else (n, n)


def coverage_line(rows: list[dict], level: float = LEVEL) -> str | None:
    """One line: the share of the scored cases measured inside their stated interval, checked both
    ways (a binomial test at the level, COVERAGE_ALPHA a side: too few inside is too narrow, too
    many too wide) and the median half-width against the median error (a calibrated interval's is
    width_per_error times it; over WIDTH_SLACK times that is covered by width), over the distinct
    measurements behind the cases."""
    inside, stated = coverage(rows)
    if not stated:
        return None
    share = inside / stated
    low, high = coverage_range(stated, level)
    with_interval = [r for r in rows if r.get("scored") and r.get("interval")]
    half = statistics.median(half_width_pct(r) for r in with_interval)
    error = statistics.median(abs(r["error_shared_pct"]) for r in with_interval)
    calibrated = width_per_error(level)
    ratio = half / error if error else math.inf
    if inside < low:
        verdict = "too narrow: the intervals miss the model's own errors"
    elif inside > high:
        verdict = "too wide"
    elif ratio > WIDTH_SLACK * calibrated:
        verdict = f"covered by width: over {WIDTH_SLACK * calibrated:.1f}x the error"
    else:
        verdict = "calibrated"
    return (f"measured inside the stated {level:.0%} intervals: {inside} of {stated} scored cases ({share:.0%}; "
            f"{distinct(with_interval)} distinct measurements), median half-width {half:.1f}% against a median "
            f"|error| of {error:.1f}% ({ratio:.1f}x; calibrated normal errors give {calibrated:.2f}x): {verdict} "
            f"(the rule: {low}-{high} of {stated} inside, binomial {COVERAGE_ALPHA:.0%} a side; at most "
            f"{WIDTH_SLACK * calibrated:.1f}x)")
