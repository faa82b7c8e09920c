"""The history's pure statistics: the lookback test of the history gate (harness.gates.lookback) and the
change points across commits (harness.history.changepoints), on synthetic series with known answers (seeded)."""
from __future__ import annotations

import math
import random

import pytest

from harness.gates.lookback import MIN_RUNS, lookback
from harness.history.changepoints import change_points

STEP_AT, STEP, DRIFT, NOISE = 12, 1.3, 1.004, 0.02  # +30% at commit 12, then +0.4% a commit, 2% noise a run


def planted(seed: int, commits: int = 40, runs: int = 2) -> list[tuple[str, float]]:
    """A figure over `commits` commits (`runs` runs each): flat, a step of STEP at STEP_AT, then a slow drift."""
    rnd = random.Random(seed)
    out = []
    for i in range(commits):
        level = (STEP if i >= STEP_AT else 1.0) * DRIFT ** max(0, i - STEP_AT)
        out += [(f"c{i:02d}", level * math.exp(rnd.gauss(0, NOISE))) for _ in range(runs)]
    return out


def test_the_lookback_test_calls_a_big_rise_slower_and_noise_unchanged():
    rnd = random.Random(1)
    history = [math.exp(rnd.gauss(0, 0.05)) for _ in range(10)]
    assert lookback(history, 1.5, 0.05, 0.15, lower_is_better=True).verdict == "slower"
    assert lookback(history, 1.02, 0.05, 0.15, lower_is_better=True).verdict == "unchanged"
    assert lookback(history, 0.6, 0.05, 0.15, lower_is_better=True).verdict == "faster"
    # throughput: lower is the regression
    assert lookback(history, 0.6, 0.05, 0.15, lower_is_better=False).verdict == "slower"
    # significant but below the minimum factor: unchanged
    tight = [1.0 + 0.001 * (i % 3) for i in range(10)]
    result = lookback(tight, 1.1, 0.05, 0.15, lower_is_better=True)
    assert result.t > result.critical and result.verdict == "unchanged"
    assert lookback(tight, 1.2, 0.05, 0.15, lower_is_better=True).verdict == "slower"


def test_too_little_history_is_inconclusive():
    assert lookback([1.0] * (MIN_RUNS - 1), 5.0, 0.05, 0.15, True).verdict == "inconclusive"
    assert lookback([1.0, 1.0, 1.0], 5.0, 0.05, 0.15, True).verdict == "inconclusive"  # no spread at all


@pytest.mark.slow  # a Monte Carlo study of many simulated histories
def test_the_false_alarm_rate_is_alpha_and_the_band_widens_with_few_runs():
    """Same-distribution draws: a one-sided test at alpha = 0.05 with no minimum factor alarms in about 5%
    (the t prediction interval is exact for normal log values); with K = 4 the band is wider than with K = 20."""
    rnd = random.Random(2)
    for k in (3, 10):  # K = 3: without the sqrt(1 + 1/K) of a new observation the rate is 6.4% (5.9% drawn)
        alarms = 0
        for _ in range(10000):
            values = [math.exp(rnd.gauss(0, 0.1)) for _ in range(k + 1)]
            alarms += lookback(values[:k], values[k], 0.05, 0.0, True).verdict == "slower"
        assert 0.04 < alarms / 10000 < 0.056, (k, alarms)  # 4.5% and 5.2% here; 5.9% without the sqrt
    narrow = lookback([math.exp(rnd.gauss(0, 0.1)) for _ in range(20)], 1.0, 0.05, 0.0, True).band
    wide = lookback([math.exp(rnd.gauss(0, 0.1)) for _ in range(4)], 1.0, 0.05, 0.0, True).band
    assert wide[1] / wide[0] > narrow[1] / narrow[0]


def test_a_planted_step_is_found_where_it_is_with_an_interval_that_covers_it():
    """In 20 seeded histories: the step at its commit every time, its 95% interval covering +30% in at least
    18 (19 expected)."""
    covered = 0
    for seed in range(20):
        steps, _ = change_points(planted(seed))
        big = [s for s in steps if s.ratio > 1.15]
        assert [s.commit for s in big] == [f"c{STEP_AT:02d}"], (seed, steps)
        assert big[0].before == f"c{STEP_AT - 1:02d}" and 1.2 < big[0].ratio < 1.4
        covered += big[0].low < STEP < big[0].high
    assert covered >= 18, covered


def test_a_slow_drift_is_found_though_no_single_comparison_flags_it():
    """+0.4% a commit over 28 commits (+12%): the history gate's test at its settings (a 15% factor, 0.05 over 6
    cells) never flags one commit against the 5 before it; the change points report the drift (a line over
    the segment after the step)."""
    found = 0
    for seed in range(20):
        history = planted(seed)
        _, drifts = change_points(history)
        found += any(d.first == f"c{STEP_AT:02d}" and d.last == "c39" and d.low > 1 and d.change > 1.05 for d in drifts)
        by_commit: dict[str, list[float]] = {}
        for commit, value in history:
            by_commit.setdefault(commit, []).append(value)
        commits = list(by_commit)
        for i in range(STEP_AT + 5, len(commits)):
            earlier = [v for c in commits[i - 5:i] for v in by_commit[c]]
            assert lookback(earlier, by_commit[commits[i]][0], 0.05 / 6, 0.15, True).verdict != "slower"
    assert found >= 17, found


def test_pure_noise_has_few_change_points():
    flagged = 0
    for seed in range(40):
        rnd = random.Random(100 + seed)
        flat = [(f"c{i:02d}", math.exp(rnd.gauss(0, 0.03))) for i in range(40) for _ in range(2)]
        steps, drifts = change_points(flat)
        flagged += bool(steps or drifts)
    assert flagged <= 6, flagged


def test_too_short_a_series_has_no_change_point():
    assert change_points([("a", 1.0), ("b", 2.0), ("c", 2.0)]) == ([], [])


def test_one_run_off_at_the_end_is_no_step():
    """A step needs MIN_SEGMENT (2) runs on each side: one run far off may be an outlier (a loaded run)."""
    rnd = random.Random(5)
    runs = [(f"c{i:02d}", math.exp(rnd.gauss(0, 0.01))) for i in range(20)] + [("c20", 2.0)]
    assert change_points(runs)[0] == []
    assert [s.commit for s in change_points(runs + [("c21", 2.0)])[0]] == ["c20"]


def test_a_figure_equal_in_every_run_has_no_change_point():
    assert change_points([(f"c{i:02d}", 40.0) for i in range(30)]) == ([], [])
