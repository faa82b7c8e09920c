"""What issue 38 added to the check's model, each on numbers worked out by hand: the step's path beside the
device (harness.analysis.stages.step_path, targetmodel.path_seconds), the ranks' CPU and wait across rank
counts from the calibration at one rank more (checkcases.case_costs, predict_case), the CPU a run can use
(scoring.usable_share), the cases across the boundaries, and the prediction's interval and its
coverage (harness.checks.predictions.interval)."""
from __future__ import annotations

import math
from dataclasses import replace
from types import SimpleNamespace

import pytest

from harness.analysis import checkcases, rankwait, stages
from harness.analysis.targetmodel import Costs, predict
from harness.checks.predictions import cases as predcases
from harness.checks.predictions import interval, scoring
from harness.checks.predictions.calibration import Visit
from harness.config.accelerators import get_accelerator
from harness.config.target import Target
from harness.measure.rankrecord import RankRecord

V100 = get_accelerator("V100-16GB")


def _target(**kw) -> Target:
    return Target(**{**dict(nodes=1, gpus_per_node=1, cores_per_node=64.0, accelerator="V100-16GB",
                            workers_per_rank=8, batch_size=32), **kw})


def test_a_step_waits_for_its_copy_overhead_and_agreement_beside_the_device():
    # device 1 ms a sample; 0.1 ms copy a sample and 3.2 ms a step (0.1 ms a sample at 32): 1.2 ms a sample
    c = Costs(workload="pixels", loader_s=1e-4, rank_s=1e-4, device_s=1e-3, copy_s=1e-4, serial_step_s=3.2e-3)
    p = predict(c, _target(), V100)
    assert p.binds == "device" and p.per_rank == pytest.approx(1 / 1.2e-3)
    assert p.au_pct == pytest.approx(100 / 1.2) and p.stall_pct == pytest.approx(0, abs=1e-9)
    assert predict(replace(c, copy_s=0.0, serial_step_s=0.0), _target(), V100).per_rank == pytest.approx(1000)


def _record(rank: int, h2d, overhead, peer, samples: int = 64) -> RankRecord:
    n = len(h2d)
    return RankRecord(rank=rank, wait=[0.0] * n, h2d=list(h2d), peer_wait=list(peer), device=[0.01] * n,
                      overhead=list(overhead), step=[0.02] * n, samples=samples, steps=n)


def test_the_step_path_is_measured_from_the_ranks_step_parts():
    # two ranks, two steps: the copy per sample; per step the mean overhead plus the least peer wait (the
    # last to arrive waits for the agreement only; the other rank's longer wait is imbalance)
    a = _record(0, [0.002, 0.002], [0.001, 0.003], [0.004, 0.0005])
    b = _record(1, [0.002, 0.002], [0.001, 0.003], [0.0005, 0.006])
    copy_s, serial_s = stages.step_path([a, b])
    assert copy_s == pytest.approx(0.008 / 128)
    assert serial_s == pytest.approx(0.002 + 0.0005)
    assert stages.step_path([]) == (0.0, 0.0)


def _wait(cpu_s: float = 1e-4) -> rankwait.RankWait:
    """Measured at 2 ranks: busy 10 or 12 ms a step (device 10), no agreement latency, no epoch start."""
    return rankwait.RankWait(ranks=2, busy_s=(0.010, 0.012), device_s=0.010, latency_s=0.0, restart_s=0.0,
                             restarts=0, cpu_s=cpu_s)


def test_the_ranks_cpu_and_wait_follow_the_ranks_from_the_calibration_at_one_rank_more():
    base = checkcases.CheckCase("calibration")  # 1 rank, batch 32
    bench = checkcases.Bench(read_s={}, decode_s={}, area={})
    ranks = checkcases.RanksWait(_wait(), samples=10_000)
    c = Costs(workload="pixels", loader_s=4e-4, rank_s=1e-4, device_s=1e-6)
    two = checkcases.case_costs(c, base, replace(base, world_size=2), bench, ranks)
    four = checkcases.case_costs(c, base, replace(base, world_size=4), bench, ranks)
    assert two.rank_s == pytest.approx(2e-4)  # the collectives' CPU measured at 2 ranks
    assert four.rank_s == pytest.approx(1e-4 + 3e-4)  # the ring's messages: 2 (4-1) = 6 of 2 (2-1) = 2
    assert checkcases.case_costs(c, base, replace(base, storage="mmap"), bench, ranks).rank_s == pytest.approx(1e-4)
    assert checkcases.case_costs(c, base, replace(base, world_size=2), bench).rank_s == pytest.approx(1e-4)
    # the CPU bound moves with it: 2 CPUs, 2 ranks, (0.4 + 0.2) ms a sample
    p = checkcases.predict_case(c, base, replace(base, world_size=2), bench, V100, 2.0, ranks=ranks)
    assert p.binds == "loader CPU" and p.samples_per_s == pytest.approx(2 / 6e-4)
    # on 64 CPUs the step binds: E[max of 2 draws of 10 or 12 ms] = 11.5 ms, AU 10 / 11.5
    fast = replace(c, loader_s=1e-5, device_s=0.010 / 32)  # the device alone: 10 ms a step
    wide = checkcases.predict_case(fast, base, replace(base, world_size=2), bench, V100, 64.0, ranks=ranks)
    assert wide.binds == "ranks' wait" and wide.au_pct == pytest.approx(100 * 10 / 11.5)


def test_the_calibration_at_one_rank_more_is_found_and_the_waits_of_its_visits_pool():
    base = checkcases.CheckCase("calibration", workers=1)
    all_cases = predcases.cases(base, 224, None, allowance=2)
    assert predcases.ranks_calibration(all_cases) == "ranks 1 -> 2"
    assert predcases.ranks_calibration([base, replace(base, name="x", world_size=2, storage="mmap")]) is None
    pooled = rankwait.pooled([_wait(1e-4), None, replace(_wait(3e-4), busy_s=(0.02,), restarts=1, restart_s=0.05)])
    assert pooled.busy_s == (0.010, 0.012, 0.02) and pooled.cpu_s == pytest.approx(2e-4)
    assert pooled.restarts == 1 and pooled.restart_s == 0.05  # the mean of those that had one
    assert rankwait.pooled([None]) is None


def _visit(throughput: float, loader: float, rank: float, outside: float) -> Visit:
    figures = {"throughput": throughput, "loader_cpu_s_per_sample": loader, "rank_cpu_s_per_sample": rank,
               "other_cpu_pct": outside}
    return Visit(SimpleNamespace(figures=figures), 0.0)


def test_the_cpu_a_run_can_use_is_measured_where_the_cpu_binds_it():
    # 1500 samples/s x 0.6 ms = 0.9 of the CPU, with 10% of it taken by others: 1.0 of what was left
    visits = [_visit(1500.0, 5e-4, 1e-4, 10.0), _visit(1400.0, 5e-4, 1e-4, 0.0)]
    assert scoring.usable_share(visits) == pytest.approx(min(1.0, (1.0 + 0.84) / 2))
    assert scoring.usable_share([_visit(1400.0, 5e-4, 1e-4, 0.0)]) == pytest.approx(0.84)
    assert scoring.usable_share([]) is None


def test_the_cases_cross_the_workers_ranks_and_page_cache_boundaries():
    base = checkcases.CheckCase("calibration", workers=1)
    names = [c.name for c in predcases.cases(base, 224, "simplejpeg", allowance=2)]
    assert {"workers 1 -> 2", "workers 1 -> 0 (inline)", "ranks 1 -> 2", "ranks 1 -> 4", "page cache cold",
            "page cache cold, storage mmap", "page cache cold, storage hdf5", "decoder pil -> simplejpeg"} <= set(names)
    by = {c.name: c for c in predcases.cases(base, 224, None, allowance=2)}
    assert by["workers 1 -> 0 (inline)"].workers == 0 and by["ranks 1 -> 4"].world_size == 4
    assert by["page cache cold, storage hdf5"].group == by["page cache cold"].group  # one launch
    pairs = {p.name for p in predcases.pairings(list(by.values()), 2)}
    assert {"ranks 1 -> 4 on 2 CPUs (from 1)", "workers 1 -> 0 (inline) on 2 CPUs (from 1)"} <= pairs
    assert len(pairs) - 1 >= 16  # scored at most: every pairing but the calibration's own row


def _spread(**kw) -> interval.Spread:
    return interval.Spread(**{**dict(costs=(1000.0, 1000.0), load=(1000.0,), noise_sd=0.05, noise_df=2,
                                                visits=2), **kw})


def test_the_interval_propagates_each_spread_at_the_t_quantile():
    t = 2.919986  # two-sided 90%, 2 df
    assert interval.half_width(_spread()) == pytest.approx(t * 0.05 / math.sqrt(2), rel=1e-5)
    costs = _spread(costs=(1000.0, 1000.0 * math.exp(0.04)))  # sd of log 0.04 / sqrt 2, over 2 visits
    var = (0.04 / math.sqrt(2)) ** 2 / 2 + 0.05 ** 2 / 2
    assert interval.half_width(costs) == pytest.approx(t * math.sqrt(var), rel=1e-5)
    load = _spread(load=(900.0, 1100.0))  # the case's visits' loads move the prediction
    assert interval.half_width(load) > interval.half_width(_spread())
    low, high = interval.interval(2000.0, _spread())
    assert low * high == pytest.approx(2000.0 ** 2) and low < 2000.0 < high  # symmetric in log
    assert interval.interval(2000.0, _spread(noise_df=0)) is None  # no measured spread: none stated


def test_the_noise_is_robust_to_a_case_that_met_a_burst():
    quiet = [[100.0, 100.0 * math.exp(0.1)], [50.0, 50.0 * math.exp(-0.1)], [80.0, 80.0 * math.exp(0.1)], [7.0]]
    sd, df = interval.robust_sd(quiet)
    assert sd == pytest.approx(0.1 / math.sqrt(2) / 0.67449, rel=1e-3)  # |Z|'s median scales each to an sd
    assert df == 1  # three df at the median's 37% efficiency
    burst = interval.robust_sd(quiet + [[100.0, 100.0 * math.exp(0.6)]])  # one case's visits 6x as far apart
    assert burst[0] < 1.2 * sd  # a mean of squares would more than double it
    three = interval.robust_sd([[1.0, math.exp(0.1), math.exp(0.2)]] * 4)  # 2 df each: sd 0.1 / 0.8326
    assert three == (pytest.approx(0.1 / math.sqrt(interval._chi2_median(2) / 2), rel=1e-6), 3)
    assert interval.robust_sd([[5.0]]) == (0.0, 0)


def test_a_calibrated_interval_is_about_2_4_times_the_median_error():
    assert interval.width_per_error() == pytest.approx(1.6449 / 0.6745, rel=1e-3)


def _scored(inside: int, cases: int = 10, half_pct: float = 3.0, error_pct: float = 2.0) -> list[dict]:
    h = math.exp(half_pct / 100)
    return [{"scored": True, "config": f"c{i}", "case": f"m{i % 8}", "interval": [100 / h, 100 * h],
             "inside": i < inside, "error_shared_pct": error_pct} for i in range(cases)]


def test_coverage_is_checked_both_ways_and_against_the_error_over_distinct_measurements():
    rows = _scored(6)
    rows.append({"scored": False, "interval": [1, 2], "inside": False})  # a calibration: not counted
    rows.append({"scored": True, "config": "x", "interval": None, "inside": False})  # no interval: not counted
    assert interval.coverage(rows) == (6, 10)
    line = interval.coverage_line(rows)
    assert "6 of 10 scored cases (60%; 8 distinct measurements)" in line and ": too narrow" in line
    assert "(the rule: 7-10 of 10 inside, binomial 5% a side" in line  # P(X <= 6) = 1.3%, P(X <= 7) = 7.0%
    assert ": calibrated" in interval.coverage_line(_scored(7)) and ": calibrated" in interval.coverage_line(_scored(9))
    # every case inside: calibrated 90% intervals do that 0.9^10 = 35% of the time over 10, so only the width
    # can show them too wide there; from 29 cases on the count can (0.9^30 = 4.2%)
    assert ": calibrated" in interval.coverage_line(_scored(10))
    assert ": too wide" in interval.coverage_line(_scored(30, cases=30))
    assert interval.coverage_range(18) == (14, 18)
    wide = interval.coverage_line(_scored(9, half_pct=10.0, error_pct=2.0))
    assert "half-width 10.0% against a median |error| of 2.0% (5.0x; calibrated normal errors give 2.44x)" in wide
    assert ": covered by width: over 3.7x the error" in wide
    assert ": calibrated" in interval.coverage_line(_scored(9, half_pct=6.0, error_pct=2.0))  # 3x: in the slack


def test_the_noise_floor_is_what_a_model_without_error_would_miss_by():
    """The sd the interval is t times, and the median |error| a perfect model would show: 0.674 x the
    median of the cases' noise sds, scored rows with an interval only."""
    spread = _spread(costs=(1000.0, 1000.0 * math.exp(0.04)))
    assert interval.noise_sd(spread) == pytest.approx(interval.half_width(spread) / 2.919986, rel=1e-5)
    assert interval.noise_sd(spread) == pytest.approx(math.sqrt((0.04 / math.sqrt(2)) ** 2 / 2 + 0.05 ** 2 / 2))
    rows = [{"scored": True, "noise_pct": sd} for sd in (4.0, 6.0, 100.0)]
    rows += [{"scored": False, "noise_pct": 50.0}, {"scored": True, "noise_pct": None}]
    assert interval.noise_floor_pct(rows) == pytest.approx(0.67449 * 6.0, rel=1e-4)
    assert interval.noise_floor_pct([{"scored": True, "noise_pct": None}]) is None


def test_the_one_cpu_calibrations_share_is_not_used_for_its_own_launch():
    model = scoring._Model(sc=None, bench=checkcases.Bench(read_s={}, decode_s={}, area={}), allowance=2,
                                     usable=0.9, ranks=None)
    base = checkcases.CheckCase("calibration")
    one = replace(base, name=predcases.ONE_CPU, cpus=1)
    assert model.cpus(base, predcases.Pairing("x", "calibration", "calibration")) == pytest.approx(1.8)
    assert model.cpus(one, predcases.Pairing("1 CPU (from 2)", "calibration", predcases.ONE_CPU)) == 1.0
    assert replace(model, usable=None).cpus(base, predcases.Pairing("x", "calibration", "calibration")) == 2.0


def test_a_cold_case_takes_its_storages_requests_and_cpu():
    base = checkcases.CheckCase("calibration")  # raw: two files a sample
    bench = checkcases.Bench(read_s={}, decode_s={}, area={}, cold_cpu_s_per_request=1e-5,
                             cold_requests={"mmap": 0.1}, cold_cpu_s={"mmap": 2e-6})
    c = Costs(workload="pixels", loader_s=4e-4, rank_s=1e-4, device_s=1e-6, requests_per_sample=2.0)
    raw = checkcases.case_costs(c, base, replace(base, cache_state="cold"), bench)
    assert raw.requests_per_sample == 2.0 and raw.cold_read_extra_s == pytest.approx(2e-5)
    mmap = checkcases.case_costs(c, base, replace(base, storage="mmap", cache_state="cold"), bench)
    assert mmap.requests_per_sample == 0.1 and mmap.cold_read_extra_s == 2e-6  # measured, not assumed
    hdf5 = checkcases.case_costs(c, base, replace(base, storage="hdf5", cache_state="cold"), bench)
    assert hdf5.requests_per_sample == 1.0  # not measured: one request a sample in a packed file
