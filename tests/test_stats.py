"""harness.stats: known values by hand, cross-checks against scipy when it is installed, properties."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness import stats

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
