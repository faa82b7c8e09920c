"""The figures of one cell (harness.results.metrics) computed from hand-made rank records with known answers."""
from __future__ import annotations

import pytest

from harness.measure.rankrecord import RankRecord
from harness.results.metrics import cell_figures, coverage, read_amplification, throughput_interval


def record(rank, wait, device, peer_wait=None, overhead=None, cost=None, samples_per_step=4, pss=100e6,
           rss=150e6, loader_cpu_s=0.0, workers=1, rank_cpu_s=0.0) -> RankRecord:
    n = len(wait)
    peer_wait = peer_wait or [0.0] * n
    overhead = overhead or [0.0] * n
    h2d = [0.0] * n
    step = [sum(parts) for parts in zip(wait, h2d, peer_wait, device, overhead)]
    return RankRecord(rank=rank, wait=wait, h2d=h2d, peer_wait=peer_wait, device=device, overhead=overhead,
                      padded=[0.0] * n, step=step, steps=n, window_s=sum(step), cost=cost or [1.0] * n,
                      samples=samples_per_step * n, padded_pixels=1000 * n, real_pixels=800 * n,
                      nbytes=10_000 * n, host_pss_peak=pss, host_rss_peak=rss, device_peak_bytes=2e9, overruns=1,
                      batch_sizes=[samples_per_step] * n, oom_events=0, shadow_steps=0, loader_cpu_s=loader_cpu_s,
                      workers=workers, rank_cpu_s=rank_cpu_s)


def test_known_values():
    r0 = record(0, wait=[0.1, 0.1], device=[0.3, 0.2], peer_wait=[0.0, 0.1])
    r1 = record(1, wait=[0.3, 0.3], device=[0.1, 0.1], overhead=[0.0, 0.1], pss=300e6)
    f = cell_figures([r1, r0])
    assert f["throughput"] == pytest.approx(16 / 0.9)  # slowest rank's window
    assert f["stall_mean_pct"] == pytest.approx((0.2 / 0.8 + 0.6 / 0.9) / 2 * 100)
    assert f["stall_max_pct"] == pytest.approx(0.6 / 0.9 * 100)
    assert f["au_pct"] == pytest.approx((0.5 / 0.8 + 0.2 / 0.9) / 2 * 100)  # device busy / wall only
    assert f["peer_wait_pct"] == pytest.approx((0.1 / 0.8 + 0) / 2 * 100)
    assert f["overhead_pct"] == pytest.approx((0 + 0.1 / 0.9) / 2 * 100)
    assert sum(f[k] for k in ("stall_mean_pct", "h2d_pct", "peer_wait_pct", "au_pct", "overhead_pct")) \
        == pytest.approx(100)
    assert f["host_pss_peak_mb"] == pytest.approx(300) and f["host_pss_total_mb"] == pytest.approx(400)
    assert f["padding_waste_pct"] == pytest.approx(20)
    assert f["overrun_pct"] == pytest.approx(50)


def test_step_imbalance_sees_stragglers_that_move_between_ranks():
    # the slow step alternates between the ranks: window totals are equal, every step is unbalanced
    r0 = record(0, wait=[0.3, 0.0, 0.3, 0.0], device=[0.1] * 4, peer_wait=[0.0, 0.3, 0.0, 0.3])
    r1 = record(1, wait=[0.0, 0.3, 0.0, 0.3], device=[0.1] * 4, peer_wait=[0.3, 0.0, 0.3, 0.0])
    f = cell_figures([r0, r1])
    assert f["window_imbalance"] == pytest.approx(1.0)
    assert f["step_imbalance"] == pytest.approx(0.4 / 0.25)  # busy 0.4 vs 0.1 in every step


def test_cost_imbalance_per_step():
    r0 = record(0, wait=[0.1, 0.1], device=[0.1, 0.1], cost=[3.0, 1.0])
    r1 = record(1, wait=[0.1, 0.1], device=[0.1, 0.1], cost=[1.0, 1.0])
    assert cell_figures([r0, r1])["cost_imbalance"] == pytest.approx((3 / 2 + 1) / 2)


def test_cores_to_feed_from_loader_cpu_and_device_rate():
    # 4 samples per step, 0.1 s of device per step: the device eats 40 samples/s; the loader spent 0.8 CPU s
    # on 8 samples, 0.1 s per sample: 4 cores keep it fed
    r = record(0, wait=[0.3, 0.3], device=[0.1, 0.1], loader_cpu_s=0.8)
    f = cell_figures([r])
    assert f["device_samples_per_s"] == pytest.approx(40)
    assert f["loader_cpu_s_per_sample"] == pytest.approx(0.1)
    assert f["cores_to_feed"] == pytest.approx(4)
    # the rank's own CPU runs on the same cores: 0.4 s on 8 samples adds 0.05 s per sample, 2 more cores
    r = record(0, wait=[0.3, 0.3], device=[0.1, 0.1], loader_cpu_s=0.8, rank_cpu_s=0.4)
    f = cell_figures([r])
    assert f["rank_cpu_s_per_sample"] == pytest.approx(0.05) and f["cores_to_feed"] == pytest.approx(6)
    inline = record(0, wait=[0.3, 0.3], device=[0.1, 0.1], loader_cpu_s=5.0, workers=0, rank_cpu_s=1.0)
    inline = cell_figures([inline])
    assert inline["loader_cpu_s_per_sample"] == pytest.approx(0.6 / 8)  # no workers: the rank's own wait
    assert inline["rank_cpu_s_per_sample"] == pytest.approx(0.4 / 8)  # and the rest of its CPU


def test_throughput_interval_brackets_the_estimate():
    r = record(0, wait=[0.1, 0.2, 0.1, 0.3, 0.1, 0.2, 0.1, 0.2], device=[0.1] * 8)
    f = cell_figures([r])
    low, high = f["throughput_ci"]
    assert low < f["throughput"] < high
    assert (low + high) / 2 == pytest.approx(f["throughput"])  # centred on the figure it qualifies
    assert "batch means" in f["throughput_ci_label"] and "4 blocks" in f["throughput_ci_label"]


def test_throughput_interval_divides_by_the_slowest_window():
    # rank 1's window is the longest (0.1 s of overhead after its steps' sum): its steps are the seconds,
    # though rank 0's steps sum to more; the interval brackets samples / the slowest window's steps
    r0 = record(0, wait=[0.3, 0.1, 0.3, 0.1, 0.3, 0.1, 0.3, 0.1], device=[0.1] * 8)
    r1 = record(1, wait=[0.1, 0.2, 0.1, 0.2, 0.1, 0.2, 0.1, 0.2], device=[0.1] * 8)
    r1.window_s = sum(r0.step) + 0.1
    ci = throughput_interval([r0, r1])["throughput_ci"]
    by_r1, by_r0 = 64 / sum(r1.step), 64 / sum(r0.step)  # 32 and 26.7 samples/s
    assert ci[0] <= by_r1 <= ci[1] and (ci[0] + ci[1]) / 2 == pytest.approx(by_r1) and ci[0] > by_r0
    # a rank without its per-step lists, or too few steps: no interval
    assert throughput_interval([r0, RankRecord(rank=1)]) == {}
    assert throughput_interval([record(0, wait=[0.1] * 3, device=[0.1] * 3)]) == {}


def test_no_steps_gives_no_rates():
    r = record(0, wait=[], device=[])
    f = cell_figures([r])
    assert "throughput" not in f and f["window_steps"] == 0


def consumed_record(rank, epochs, completed) -> RankRecord:
    return RankRecord(rank=rank, consumed=epochs, completed_epochs=completed)


def test_coverage_accepts_distributed_sampler_padding():
    # 5 samples on 2 ranks: torch pads one index (0) so both ranks get 3
    records = [consumed_record(0, {0: [3, 0, 4]}, 1), consumed_record(1, {0: [1, 2, 0]}, 1)]
    cov = coverage(records, 5)
    assert cov.ok and cov.padding_allowed == 1 and cov.coverage_pct == 100.0
    assert cov.epochs[0].duplicates == 1 and cov.epochs[0].missing == 0


def test_coverage_flags_duplicates_and_missing():
    records = [consumed_record(0, {0: [0, 1, 2]}, 1), consumed_record(1, {0: [0, 1, 2]}, 1)]
    cov = coverage(records, 6)
    e = cov.epochs[0]
    assert not cov.ok and e.duplicates == 3 and e.missing == 3 and e.broken


def test_partial_epoch_judges_duplicates_only():
    records = [consumed_record(0, {"0": [0, 1], "1": [5]}, 1), consumed_record(1, {"0": [2, 3], "1": [3]}, 1)]
    cov = coverage(records, 4)
    assert not cov.ok  # index 5 does not exist
    assert cov.epochs[1].out_of_range == 1 and cov.epochs[1].missing is None
    records[0].consumed["1"] = [1]
    assert coverage(records, 4).ok


def test_read_amplification_is_device_bytes_over_delivered_bytes():
    r0, r1 = record(0, wait=[0.1], device=[0.1]), record(1, wait=[0.1], device=[0.1])
    r0.disk_read_bytes, r1.disk_read_bytes = 30_000, 50_000  # 10 kB delivered by each rank
    f = cell_figures([r0, r1])
    assert f["read_amplification"] == pytest.approx(80_000 / 20_000)
    assert f["disk_read_mb"] / f["logical_read_mb"] == pytest.approx(f["read_amplification"])
    assert read_amplification(0, 10) == {"read_amplification": 0.0}  # all from the page cache
    assert read_amplification(5, 0) == {} and read_amplification(None, 5) == {}


def test_an_older_line_gets_its_amplification_and_the_untuned_advice_on_read():
    from harness.results.cellresult import CellResult

    line = {"schema": 2, "cell": "storage=mmap", "strategies": {"storage": "mmap"},
            "figures": {"throughput": 124.0, "disk_read_mb": 11260.0, "logical_read_mb": 10.8}}
    r = CellResult.from_json(line)
    assert r.figures.read_amplification == pytest.approx(11260 / 10.8)  # the 1,041x
    assert r.advice == "normal"  # written before the readers gave hints: the kernel's defaults
    assert r.to_json() == line  # nothing derived is written back
    current = CellResult.from_json(dict(line, advice="random", figures=dict(line["figures"], read_amplification=2.0)))
    assert current.advice == "random" and current.figures.read_amplification == 2.0


def test_kernel_au_is_the_profiled_steps_kernel_time_over_their_span_all_ranks_pooled():
    import dataclasses

    a = dataclasses.replace(record(0, [0.0] * 4, [0.01] * 4), kernel_busy_s=0.3, kernel_span_s=0.5)
    b = dataclasses.replace(record(1, [0.0] * 4, [0.01] * 4), kernel_busy_s=0.1, kernel_span_s=0.5)
    assert cell_figures([a, b])["kernel_au_pct"] == pytest.approx(40.0)
    assert "kernel_au_pct" not in cell_figures([record(0, [0.0] * 4, [0.01] * 4)])  # not profiled: no figure
    assert "kernel_busy_s" not in record(0, [0.0] * 4, [0.01] * 4).to_json()  # nor keys in its rank record


def test_the_host_launch_time_is_the_median_step_of_every_rank_where_recorded():
    import dataclasses

    from harness.measure.steprecorder import StepRecorder

    a = dataclasses.replace(record(0, [0.0] * 3, [0.01] * 3), launch=[0.001, 0.002, 0.009])
    b = dataclasses.replace(record(1, [0.0] * 3, [0.01] * 3), launch=[0.003, 0.004, 0.005])
    assert cell_figures([a, b])["launch_ms_p50"] == pytest.approx(3.5)
    assert "launch_ms_p50" not in cell_figures([record(0, [0.0] * 3, [0.01] * 3)])
    rec = StepRecorder(2)
    rec.add(wait=0.1, device=0.2)
    assert "launch" not in rec.as_record()  # not given: not written
    rec.add(wait=0.1, device=0.2, launch=0.004)
    assert rec.as_record()["launch"] == [0.0, 0.004]
