"""harness.results.stats: known values by hand, cross-checks against scipy when it is installed, properties."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.results import stats

finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False)
sample = st.lists(finite, min_size=1, max_size=30)


def test_median_and_cv_known_values():
    assert stats.median([3, 1, 2]) == 2
    assert stats.median([4, 1, 2, 3]) == 2.5
    assert stats.cv([5.0]) == 0.0
    assert stats.cv([0.0, 0.0]) == 0.0
    # mean 2, sample std sqrt(((1)^2 + 0 + 1^2) / 2) = 1
    assert stats.cv([1.0, 2.0, 3.0]) == pytest.approx(0.5)
    assert stats.cv([10.0, 10.0, 10.0]) == 0.0


@pytest.mark.parametrize("bad", [[], [1.0, float("nan")], [float("inf")]])
def test_bad_samples_are_rejected(bad):
    for fn in (stats.median, stats.cv, stats.median_ci, stats.summary):
        with pytest.raises(ValueError):
            fn(bad)


def test_median_ci_ranks_by_hand():
    # n=10: P(B<=1) = 11/1024 -> coverage 1 - 22/1024 = 0.9785 >= 0.95; P(B<=2) = 56/1024 -> 0.89 < 0.95
    assert stats.median_ci_ranks(10) == (2, 9, pytest.approx(1 - 22 / 1024))
    # n=6: the full range covers 1 - 2/64 = 0.96875; the next ranks only 1 - 14/64
    assert stats.median_ci_ranks(6) == (1, 6, pytest.approx(62 / 64))
    # n=5: even the full range covers only 1 - 2/32 = 0.9375 < 0.95: (min, max), documented
    assert stats.median_ci_ranks(5) == (1, 5, pytest.approx(30 / 32))
    # n=20 (standard tables): x_(6), x_(15), coverage 0.9586
    j, k, cov = stats.median_ci_ranks(20)
    assert (j, k) == (6, 15) and cov == pytest.approx(0.95861, abs=1e-5)
    # a lower confidence narrows it: n=10 at 80% -> ranks 3, 8 (coverage 0.891)
    assert stats.median_ci_ranks(10, 0.80)[:2] == (3, 8)


def test_median_ci_values():
    xs = [9.0, 1.0, 8.0, 2.0, 7.0, 3.0, 6.0, 4.0, 5.0, 10.0]
    assert stats.median_ci(xs) == (2.0, 9.0)
    assert stats.median_ci([3.0, 1.0, 2.0]) == (1.0, 3.0)  # too few for 95%: the full range
    assert stats.median_ci([4.2]) == (4.2, 4.2)


def test_summary():
    s = stats.summary([1.0, 2.0, 3.0, 4.0, 10.0])
    assert s == {"n": 5, "median": 3.0, "lo": 1.0, "hi": 10.0, "half_ci": 4.5,
                 "coverage": 30 / 32, "label": "min-max of 5 repeats, 93.8% coverage",
                 "cv": pytest.approx(np.std([1, 2, 3, 4, 10], ddof=1) / 4.0), "min": 1.0, "max": 10.0}


def test_u_distribution_by_hand():
    # n1=n2=2: orderings xxyy(U=0) xyxy(1) xyyx(2) yxxy(2) yxyx(3) yyxx(4)
    assert stats.u_distribution(2, 2) == [1, 1, 2, 1, 1]
    assert stats.u_distribution(1, 3) == [1, 1, 1, 1]
    for n1, n2 in [(3, 5), (7, 7), (20, 20)]:
        c = stats.u_distribution(n1, n2)
        assert sum(c) == math.comb(n1 + n2, n1) and c == c[::-1]
        assert stats.u_distribution(n2, n1) == c


def test_mann_whitney_by_hand():
    # complete separation, 3 vs 3: U = 9 (every a above every b), p = 2 / C(6,3) = 0.1
    assert stats.mann_whitney_u([4, 5, 6], [1, 2, 3]) == (9.0, pytest.approx(0.1))
    assert stats.mann_whitney_u([1, 2, 3], [4, 5, 6]) == (0.0, pytest.approx(0.1))
    # 2 vs 2, a = [1, 4], b = [2, 3]: U = 2 = n1*n2/2, the centre: p = 1
    assert stats.mann_whitney_u([1, 4], [2, 3]) == (2.0, 1.0)
    # 1 vs 3, a above all: U = 3, P(U >= 3) = 1/4, two-sided 0.5
    assert stats.mann_whitney_u([9], [1, 2, 3]) == (3.0, pytest.approx(0.5))
    # all equal: asymptotic with zero variance -> p = 1
    assert stats.mann_whitney_u([1, 1, 1], [1, 1]) == (3.0, 1.0)
    with pytest.raises(ValueError):
        stats.mann_whitney_u([1, 2], [2, 3], method="exact")
    assert stats.min_attainable_p(2, 2) == pytest.approx(1 / 3)
    assert stats.min_attainable_p(4, 4) == pytest.approx(2 / 70)


def test_mann_whitney_asymptotic_by_hand():
    # a=[1,2,2,3], b=[2,4]: ranks 1, 3, 3, 5 | 3, 6; U1 = 12 - 10 = 2; ties: one group of 3 -> 24
    # var = 4*2/12 * (7 - 24/30) = 4.1333; z = (max(2, 6) - 4 - 0.5) / sqrt(var)
    u, p = stats.mann_whitney_u([1, 2, 2, 3], [2, 4])
    z = 1.5 / math.sqrt(8 / 12 * (7 - 24 / 30))
    assert u == 2.0 and p == pytest.approx(math.erfc(z / math.sqrt(2)))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 10_000), min_size=1, max_size=20, unique=True), st.data())
def test_exact_matches_scipy(values, data):
    scipy_stats = pytest.importorskip("scipy.stats")
    if len(values) < 2:
        return
    k = data.draw(st.integers(1, len(values) - 1))
    a, b = [float(v) for v in values[:k]], [float(v) for v in values[k:]]
    ref = scipy_stats.mannwhitneyu(a, b, alternative="two-sided", method="exact")
    u, p = stats.mann_whitney_u(a, b, method="exact")
    assert u == pytest.approx(ref.statistic) and p == pytest.approx(ref.pvalue, rel=1e-9, abs=1e-12)
    assert stats.mann_whitney_u(a, b) == (u, p)  # auto picks exact: small, no ties


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 8), min_size=1, max_size=40), st.lists(st.integers(0, 8), min_size=1,
                                                                        max_size=40))
def test_asymptotic_matches_scipy(a, b):
    scipy_stats = pytest.importorskip("scipy.stats")
    ref = scipy_stats.mannwhitneyu(a, b, alternative="two-sided", method="asymptotic")
    u, p = stats.mann_whitney_u(a, b, method="asymptotic")
    assert u == pytest.approx(ref.statistic)
    if np.isnan(ref.pvalue):  # scipy: 0/0 when every value is tied; we say no evidence
        assert p == 1.0
    else:
        assert p == pytest.approx(ref.pvalue, rel=1e-9, abs=1e-12)


def test_large_samples_use_the_normal_approximation():
    rng = np.random.default_rng(0)
    a, b = rng.normal(1.0, 0.1, 30), rng.normal(1.2, 0.1, 30)
    assert stats.mann_whitney_u(a, b) == stats.mann_whitney_u(a, b, method="asymptotic")
    assert stats.mann_whitney_u(a, b)[1] < 1e-6


@given(sample)
def test_ci_contains_the_median(xs):
    lo, hi = stats.median_ci(xs)
    assert min(xs) <= lo <= stats.median(xs) <= hi <= max(xs)
    s = stats.summary(xs)
    assert s["half_ci"] >= 0 and s["n"] == len(xs)


@given(sample, sample)
def test_p_in_unit_interval_and_symmetric(a, b):
    u_ab, p_ab = stats.mann_whitney_u(a, b)
    u_ba, p_ba = stats.mann_whitney_u(b, a)
    assert 0.0 <= p_ab <= 1.0
    assert p_ab == pytest.approx(p_ba)
    assert u_ab + u_ba == pytest.approx(len(a) * len(b))


# --- Student t quantiles and batch means ------------------------------------------------------------------

@pytest.mark.parametrize("confidence, df, expected", [
    # standard two-sided tables (4 significant digits)
    (0.95, 1, 12.706), (0.95, 2, 4.303), (0.95, 3, 3.182), (0.95, 4, 2.776), (0.95, 9, 2.262),
    (0.95, 10, 2.228), (0.95, 20, 2.086), (0.95, 30, 2.042), (0.95, 60, 2.000), (0.95, 120, 1.980),
    (0.90, 1, 6.314), (0.90, 5, 2.015), (0.90, 29, 1.699), (0.99, 1, 63.657), (0.99, 5, 4.032),
    (0.99, 9, 3.250), (0.99, 40, 2.704), (0.80, 7, 1.415),
])
def test_t_quantile_known_values(confidence, df, expected):
    assert stats.t_quantile(confidence, df) == pytest.approx(expected, abs=6e-4)


def test_t_quantile_closed_forms_and_limits():
    # df = 1 is Cauchy: tan(pi * c / 2); df = 2: t = sqrt(2 c^2 / (1 - c^2))... P(|T|<=t) = t / sqrt(2 + t^2)
    for c in (0.5, 0.9, 0.95, 0.99):
        assert stats.t_quantile(c, 1) == pytest.approx(math.tan(math.pi * c / 2), rel=1e-10)
        assert stats.t_quantile(c, 2) == pytest.approx(math.sqrt(2 * c * c / (1 - c * c)), rel=1e-10)
    assert stats.t_quantile(0.95, 2000) == pytest.approx(1.959964, abs=2e-3)  # tends to the normal 1.96
    for bad in ((0.95, 0), (1.0, 5), (0.0, 5), (0.95, 2.5)):
        with pytest.raises(ValueError):
            stats.t_quantile(*bad)


def test_batch_means_by_hand():
    # 8 steps, 4 blocks of 2: block totals S = 20, 20, 20, 20; W = 0.2, 0.2, 0.2, 0.2 -> zero residuals
    iv = stats.batch_means_interval([10] * 8, [0.1] * 8, blocks=4)
    assert iv == {"low": pytest.approx(100), "high": pytest.approx(100), "estimate": pytest.approx(100),
                  "method": "batch means", "level": 0.95, "n": 4}
    # 4 steps, blocks capped at n // 2 = 2: S = (10, 10), W = (0.1, 0.3): T = 50, r = (5, -5),
    # se = sqrt(50 / 2) / 0.2 = 25, half = 12.706 * 25
    iv = stats.batch_means_interval([5, 5, 5, 5], [0.05, 0.05, 0.15, 0.15])
    assert iv["n"] == 2 and iv["estimate"] == pytest.approx(50)
    assert iv["high"] == pytest.approx(50 + stats.t_quantile(0.95, 1) * 25)
    assert iv["low"] == 0.0  # clipped: a rate is not negative
    # the estimate is the ratio of sums, not a mean of per-step rates
    iv = stats.batch_means_interval([10, 10, 10, 10, 10], [0.1, 0.1, 0.1, 0.1, 0.6])
    assert iv["estimate"] == pytest.approx(50 / 1.0) and iv["n"] == 2


def test_batch_means_too_few_steps_and_bad_input():
    assert stats.batch_means_interval([1, 2, 3], [1, 1, 1]) is None
    assert stats.batch_means_interval([], []) is None
    with pytest.raises(ValueError):
        stats.batch_means_interval([1, 2, 3, 4], [1, 1, 1])
    with pytest.raises(ValueError):
        stats.batch_means_interval([1, 2, 3, float("nan")], [1, 1, 1, 1])
    with pytest.raises(ValueError):
        stats.batch_means_interval([1, 2, 3, 4], [0, 0, 0, 0])
    # 30 steps at the default 10 blocks: 10 blocks of 3; 12 steps: 6 blocks of 2
    assert stats.batch_means_interval([1] * 30, [1] * 30)["n"] == 10
    assert stats.batch_means_interval([1] * 12, [1] * 12)["n"] == 6


@pytest.mark.parametrize("steps, blocks", [(100, 10), (20, 10), (9, 10)])
def test_batch_means_coverage_iid_steps(steps, blocks):
    """i.i.d. steps with a known rate: the 95% interval covers it in ~95% of 400 simulated windows."""
    rng = np.random.default_rng(1234 + steps)
    batch, mean_s = 64, 0.2  # true rate 64 / 0.2 = 320 samples/s (E[samples] / E[seconds])
    hits, runs = 0, 400
    for _ in range(runs):
        seconds = rng.gamma(shape=8.0, scale=mean_s / 8.0, size=steps)
        samples = rng.integers(batch - 16, batch + 17, size=steps)  # mean 64
        iv = stats.batch_means_interval(samples, seconds, blocks=blocks)
        hits += iv["low"] <= batch / mean_s <= iv["high"]
    # binomial sd at p = 0.95, 400 runs: 1.1%; allow ~3.5 sd and the small-sample bias of the ratio
    assert 0.90 <= hits / runs <= 0.99


def test_batch_means_wider_at_lower_level_narrower():
    rng = np.random.default_rng(7)
    s, w = rng.integers(50, 70, 60), rng.uniform(0.1, 0.3, 60)
    a95 = stats.batch_means_interval(s, w)
    a80 = stats.batch_means_interval(s, w, confidence=0.80)
    assert a80["low"] > a95["low"] and a80["high"] < a95["high"] and a80["level"] == 0.80


def test_median_interval_labels_say_what_it_is():
    iv = stats.median_interval([3.0, 1.0, 2.0])
    assert (iv["low"], iv["high"], iv["estimate"], iv["n"]) == (1.0, 3.0, 2.0, 3)
    assert iv["level"] == 0.75 and iv["label"] == "min-max of 3 repeats, 75% coverage"
    assert stats.median_interval([1.0, 2.0])["label"] == "min-max of 2 repeats, 50% coverage"
    assert stats.median_interval(range(5))["label"] == "min-max of 5 repeats, 93.8% coverage"
    assert stats.median_interval(range(6))["label"] == "min-max of 6 repeats, 96.9% coverage"
    iv = stats.median_interval(range(10))
    assert (iv["low"], iv["high"]) == (1.0, 8.0)
    assert iv["label"] == "97.9% CI of the median, order statistics, 10 repeats"
    assert stats.median_interval([4.0])["label"] == "1 repeat, no interval"
    assert stats.interval_label({"method": "batch means", "level": 0.95, "n": 10}) == \
        "95% CI, batch means, 10 blocks"
    assert stats.interval_label(None) == "no interval"
