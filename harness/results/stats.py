"""Small-sample statistics for repeated benchmark measurements (numpy only, pure functions).

A benchmark cell is measured a handful of times (repeats). These functions summarise such samples
without assuming normality:

- `median_ci`: distribution-free confidence interval for the median from order statistics.
- `mann_whitney_u`: two-sided Mann-Whitney U test; exact for small samples without ties, else the
  normal approximation with tie and continuity correction (the same conventions as
  scipy.stats.mannwhitneyu, which the tests cross-check against).
- `batch_means_interval`: a t-interval for one window's throughput (a ratio of sums) from
  contiguous blocks of steps; `t_quantile` gives the exact Student-t critical values it uses.
- `median_interval` / `interval_label`: an interval with its method, real coverage and n, and the
  words that say so ("95% CI, batch means, 10 blocks", "min-max of 3 repeats, 75% coverage").

Every function raises ValueError for an empty sample or a non-finite value: a NaN throughput is a
bug upstream and must not silently become "unchanged".
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

EXACT_MAX_N = 20  # exact U distribution up to this many observations per side (and no ties)


def _sample(xs: Sequence[float], name: str = "sample") -> np.ndarray:
    a = np.asarray(xs, dtype=float).ravel()
    if a.size == 0:
        raise ValueError(f"{name} is empty")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} holds a non-finite value: {a.tolist()}")
    return a


def median(xs: Sequence[float]) -> float:
    return float(np.median(_sample(xs)))


def cv(xs: Sequence[float]) -> float:
    """Coefficient of variation: sample standard deviation (ddof=1) / mean; 0 for one sample.

    0 when every value is 0; NaN when the mean is 0 but the values are not all 0 (no meaningful
    scale)."""
    a = _sample(xs)
    if a.size == 1:
        return 0.0
    sd = float(np.std(a, ddof=1))
    mean = float(np.mean(a))
    if mean == 0:
        return 0.0 if sd == 0 else math.nan
    return sd / abs(mean)


def binomial_tails(k: int, n: int, p: float) -> tuple[float, float]:
    """P(X <= k) and P(X >= k) for X ~ Binomial(n, p)."""
    pmf = [math.comb(n, i) * p ** i * (1 - p) ** (n - i) for i in range(n + 1)]
    return sum(pmf[: k + 1]), sum(pmf[k:])


def _binom_half_cdf(k: int, n: int) -> float:
    """P(B <= k) for B ~ Binomial(n, 1/2), exactly (integer arithmetic, one rounding)."""
    if k < 0:
        return 0.0
    return sum(math.comb(n, i) for i in range(min(k, n) + 1)) / 2**n


def median_ci_ranks(n: int, confidence: float = 0.95) -> tuple[int, int, float]:
    """1-based ranks (j, k) of the order statistics bounding the median CI, and its exact coverage.

    The interval [x_(j), x_(n+1-j)] covers the population median with probability 1 - 2 * P(B <= j
    - 1), B ~ Binomial(n, 1/2), for any continuous distribution. j is the largest rank whose
    coverage still reaches `confidence`. When even j = 1 (the full range) falls short, which for
    95% happens for n <= 5 (coverage 1 - 2**(1-n): 50%, 75%, 87.5%, 93.75% for n = 2..5), the full
    range is returned with its real, lower coverage."""
    if n < 1:
        raise ValueError("median_ci needs at least one value")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    j = 1
    while j + 1 <= (n + 1) // 2 and 1 - 2 * _binom_half_cdf(j, n) >= confidence:
        j += 1
    coverage = 1 - 2 * _binom_half_cdf(j - 1, n) if n > 1 else 0.0
    return j, n + 1 - j, coverage


def median_ci(xs: Sequence[float], confidence: float = 0.95) -> tuple[float, float]:
    """Distribution-free (binomial, order-statistic) confidence interval for the median.

    Exact for any n >= 2 (see `median_ci_ranks`); for n too small to reach `confidence` it is the
    full range (min, max), whose real coverage is lower; for one value it is (x, x)."""
    a = np.sort(_sample(xs))
    j, k, _ = median_ci_ranks(a.size, confidence)
    return float(a[j - 1]), float(a[k - 1])


def _rank_average(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Ranks 1..n with ties given their average rank, and the sizes of the tie groups."""
    order = np.argsort(values, kind="mergesort")
    sorted_vals = values[order]
    starts = np.flatnonzero(np.r_[True, sorted_vals[1:] != sorted_vals[:-1]])
    sizes = np.diff(np.r_[starts, values.size])
    avg = starts + (sizes + 1) / 2.0  # average of the 1-based ranks starts+1 .. starts+size
    ranks = np.empty(values.size)
    ranks[order] = np.repeat(avg, sizes)
    return ranks, sizes


def u_distribution(n1: int, n2: int) -> list[int]:
    """Counts c[u] of the C(n1+n2, n1) orderings of two tie-free samples with U = u, u = 0..n1*n2.

    These are the coefficients of the Gaussian binomial [n1+n2 choose n1]_q = prod_{i=1..n1}
    (1 - q^(n2+i)) / (1 - q^i), computed in exact integer arithmetic."""
    size = n1 * n2 + 1
    poly = [1] + [0] * (size - 1)
    for i in range(1, n1 + 1):
        shift = n2 + i
        for u in range(size - 1, shift - 1, -1):  # multiply by (1 - q^shift)
            poly[u] -= poly[u - shift]
        for u in range(i, size):  # divide by (1 - q^i): r[u] = p[u] + r[u - i]
            poly[u] += poly[u - i]
    return poly


def _normal_sf(z: float) -> float:
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def mann_whitney_u(a: Sequence[float], b: Sequence[float], method: str = "auto") -> tuple[float, float]:
    """Two-sided Mann-Whitney U test. Returns (U of `a`, p).

    U counts the pairs (a_i, b_j) with a_i > b_j, ties counting 1/2 (scipy's `statistic`). The
    two-sided p-value is 2 * P(U' >= max(U, n1*n2 - U)), clipped to 1.

    method "auto": exact when both samples have at most EXACT_MAX_N values and there are no ties,
    else asymptotic. "exact": the exact null distribution of U (`u_distribution`); ties are not
    allowed. "asymptotic": normal approximation with tie-corrected variance and continuity
    correction 0.5."""
    x, y = _sample(a, "first sample"), _sample(b, "second sample")
    n1, n2 = x.size, y.size
    ranks, ties = _rank_average(np.concatenate([x, y]))
    u1 = float(ranks[:n1].sum() - n1 * (n1 + 1) / 2)
    big = max(u1, n1 * n2 - u1)
    has_ties = bool(np.any(ties > 1))
    if method == "auto":
        method = "exact" if n1 <= EXACT_MAX_N and n2 <= EXACT_MAX_N and not has_ties else "asymptotic"
    if method == "exact":
        if has_ties:
            raise ValueError("the exact Mann-Whitney test needs samples without ties; use method='asymptotic'")
        counts = u_distribution(min(n1, n2), max(n1, n2))
        upper = sum(counts[int(round(big)):])
        p = 2 * upper / math.comb(n1 + n2, n1)
    elif method == "asymptotic":
        n = n1 + n2
        tie_term = float(np.sum(ties.astype(float) ** 3 - ties))
        var = n1 * n2 / 12 * ((n + 1) - tie_term / (n * (n - 1))) if n > 1 else 0.0
        if var <= 0:  # every value equal: no evidence of a difference
            return u1, 1.0
        p = 2 * _normal_sf((big - n1 * n2 / 2 - 0.5) / math.sqrt(var))
    else:
        raise ValueError(f"method must be 'auto', 'exact' or 'asymptotic', got {method!r}")
    return u1, min(1.0, max(0.0, p))


def min_attainable_p(n1: int, n2: int) -> float:
    """The smallest two-sided p the exact test can give for these sizes: 2 / C(n1+n2, n1).

    If it is not below alpha the test can never reject: e.g. 2 vs 2 repeats gives 1/3, 3 vs 3 gives
    0.1, 4 vs 4 gives 0.029."""
    if n1 < 1 or n2 < 1:
        return 1.0
    return min(1.0, 2 / math.comb(n1 + n2, n1))


def summary(xs: Sequence[float], confidence: float = 0.95) -> dict:
    """n, median, its interval (lo, hi; half_ci = (hi - lo) / 2 is kept for old readers, but the
    interval is not symmetric about the median: show [lo, hi]), the interval's real coverage and
    its label (`median_interval`), cv, min and max of a sample."""
    a = _sample(xs)
    iv = median_interval(a, confidence)
    lo, hi = iv["low"], iv["high"]
    return {"n": int(a.size), "median": median(a), "lo": lo, "hi": hi, "half_ci": (hi - lo) / 2,
            "coverage": iv["level"], "label": iv["label"],
            "cv": cv(a), "min": float(a.min()), "max": float(a.max())}


# --- Student t quantiles ----------------------------------------------------------------------------------

def _t_two_sided_mass(t: float, df: int) -> float:
    """P(|T| <= t) for Student's t with integer df >= 1, exactly (the closed-form finite series for
    integer degrees of freedom; theta = atan(t / sqrt(df))):

    odd df:  (2/pi) * (theta + sin(theta)
                           * (cos(theta) + 2/3 cos^3 + 2*4/(3*5) cos^5 + ... up to cos^(df-2)))
    even df: sin(theta) * (1 + 1/2 cos^2 + 1*3/(2*4) cos^4 + ... up to cos^(df-2))"""
    if t <= 0:
        return 0.0
    theta = math.atan(t / math.sqrt(df))
    s, c = math.sin(theta), math.cos(theta)
    if df % 2 == 1:
        total, term = 0.0, c
        for i in range(1, (df - 1) // 2):  # terms c, 2/3 c^3, ... (df - 3) / 2 of them after the first
            total += term
            term *= c * c * (2 * i) / (2 * i + 1)
        if df > 1:
            total += term
        return min(1.0, 2 / math.pi * (theta + s * total))
    total, term = 0.0, 1.0
    for i in range(1, df // 2):
        total += term
        term *= c * c * (2 * i - 1) / (2 * i)
    total += term
    return min(1.0, s * total)


def t_quantile(confidence: float, df: int) -> float:
    """The two-sided Student-t critical value: t such that P(|T| <= t) = confidence (e.g. 0.95, 9
    df -> 2.262). Exact to ~1e-12 for any integer df >= 1 (bisection on the closed-form
    distribution)."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if int(df) != df or df < 1:
        raise ValueError(f"degrees of freedom must be a positive integer, got {df}")
    df = int(df)
    lo, hi = 0.0, 1.0
    while _t_two_sided_mass(hi, df) < confidence:
        lo, hi = hi, hi * 2
    for _ in range(200):
        mid = (lo + hi) / 2
        if _t_two_sided_mass(mid, df) < confidence:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-13 * hi:
            break
    return (lo + hi) / 2


# --- intervals that say what they are ---------------------------------------------------------------------

MIN_BATCH_STEPS = 4  # fewer measured steps than this: no batch-means interval
MIN_BLOCK_STEPS = 2


def batch_means_interval(samples: Sequence[float], seconds: Sequence[float], blocks: int = 10,
                         confidence: float = 0.95) -> dict | None:
    """A t-interval for a throughput measured in one window, from batch means of its steps.

    `samples[i]` and `seconds[i]` are step i's samples (summed over ranks) and wall seconds (the
    slowest rank's). The estimate is the ratio sum(samples) / sum(seconds). The window is cut into
    k contiguous blocks of steps (k = `blocks`, fewer when there are fewer than 2 * blocks steps,
    so that every block has at least 2 steps); the blocks' totals S_b, W_b give the ratio
    estimator's linearised residuals r_b = S_b - T * W_b and its standard error se = sqrt(sum r_b^2
    / (k (k - 1))) / mean(W_b); the interval is T -/+ t(k - 1) * se, clipped at 0 (a rate is not
    negative). Contiguous blocks absorb short-range correlation between neighbouring steps (a
    prefetch queue filling and draining).

    Returns {"low", "high", "estimate", "method": "batch means", "level", "n": k}, or None with
    fewer than 4 steps."""
    s = np.asarray(samples, dtype=float).ravel()
    w = np.asarray(seconds, dtype=float).ravel()
    if s.size != w.size:
        raise ValueError(f"samples and seconds differ in length: {s.size} vs {w.size}")
    if not (np.all(np.isfinite(s)) and np.all(np.isfinite(w))):
        raise ValueError("samples or seconds hold a non-finite value")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if blocks < 2:
        raise ValueError(f"blocks must be at least 2, got {blocks}")
    n = s.size
    if n < MIN_BATCH_STEPS:
        return None
    if w.sum() <= 0:
        raise ValueError("the steps' seconds sum to zero")
    k = max(2, min(int(blocks), n // MIN_BLOCK_STEPS))
    sb = np.array([b.sum() for b in np.array_split(s, k)])
    wb = np.array([b.sum() for b in np.array_split(w, k)])
    est = float(s.sum() / w.sum())
    resid = sb - est * wb
    se = math.sqrt(float(np.sum(resid ** 2)) / (k * (k - 1))) / float(wb.mean())
    half = t_quantile(confidence, k - 1) * se
    return {"low": max(0.0, est - half), "high": est + half, "estimate": est, "method": "batch means",
            "level": confidence, "n": k}


def median_interval(xs: Sequence[float], confidence: float = 0.95) -> dict:
    """The median of repeated measurements with its order-statistic interval and that interval's
    real coverage.

    Returns {"low", "high", "estimate" (the median), "method", "level" (the exact coverage, which
    for n <= 5 at 95% is below the asked level: the interval is then min..max), "n", "label"}. One
    value: low = high, level 0, label "1 repeat, no interval"."""
    a = np.sort(_sample(xs))
    n = int(a.size)
    j, k, coverage = median_ci_ranks(n, confidence)
    out = {"low": float(a[j - 1]), "high": float(a[k - 1]), "estimate": float(np.median(a)),
           "method": "min-max" if j == 1 else "order statistics", "level": coverage, "n": n}
    out["label"] = interval_label(out)
    return out


def _pct(level: float) -> str:
    text = f"{level * 100:.1f}".rstrip("0").rstrip(".")
    return f"{text}%"


def interval_label(interval: dict | None) -> str:
    """What an interval is, in words: "95% CI, batch means, 10 blocks", "min-max of 3 repeats, 75%
    coverage", "95.1% CI of the median, order statistics, 12 repeats"."""
    if not interval:
        return "no interval"
    if interval.get("label"):
        return interval["label"]
    method, n, level = interval.get("method"), interval.get("n"), interval.get("level")
    if method == "batch means":
        return f"{_pct(level)} CI, batch means, {n} blocks"
    if method == "min-max":
        if n is not None and n < 2:
            return "1 repeat, no interval"
        return f"min-max of {n} repeats, {_pct(level)} coverage"
    if method == "order statistics":
        return f"{_pct(level)} CI of the median, order statistics, {n} repeats"
    return f"{_pct(level) if level is not None else '?'} {method}, n={n}"
