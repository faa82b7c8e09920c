"""The target model on synthetic costs with answers worked out by hand (harness.analysis.targetmodel), the
recommendation (harness.analysis.recommend) and the check's case arithmetic (harness.analysis.checkcases,
harness.checks.predictions.cases)."""
from __future__ import annotations

from dataclasses import replace

import pytest

from harness.analysis import checkcases
from harness.analysis.recommend import recommend
from harness.analysis.targetmodel import Costs, capacity, predict
from harness.checks.predictions import cases as predcases
from harness.config.accelerators import get_accelerator
from harness.config.target import Target

V100 = get_accelerator("V100-16GB")


def costs(**kw) -> Costs:
    base = dict(workload="pixels", loader_s=0.003, rank_s=0.001, device_s=0.001, bytes_per_sample=1e6)
    return Costs(**{**base, **kw})


def target(**kw) -> Target:
    base = dict(nodes=1, gpus_per_node=1, cores_per_node=64.0, accelerator="V100-16GB", workers_per_rank=8,
                batch_size=32)
    return Target(**{**base, **kw})


def test_the_device_binds_when_the_host_has_cores_and_workers_to_spare():
    p = predict(costs(), target(gpus_per_node=4), V100)
    assert p.binds == "device" and p.samples_per_s == pytest.approx(4 * 1000) and p.au_pct == pytest.approx(100)
    assert p.stall_pct == pytest.approx(0, abs=1e-6)


def test_one_worker_bounds_the_rank_at_one_over_its_cost():
    p = predict(costs(), target(workers_per_rank=2), V100)
    assert p.binds == "loader workers" and p.per_rank == pytest.approx(2 / 0.003)
    assert p.au_pct == pytest.approx(100 * (2 / 0.003) * 0.001)


def test_the_cores_bound_every_rank_together():
    # 4 ranks x (0.003 + 0.001) s per sample on 2 cores: 2 / (4 x 0.004) = 125 samples/s per rank
    p = predict(costs(), target(gpus_per_node=4, cores_per_node=2.0), V100)
    assert p.binds == "loader CPU" and p.samples_per_s == pytest.approx(4 * 125)


def test_a_busy_host_raises_the_cost_by_the_contention_factor():
    # 1 core, fully busy at the predicted rate: the cost doubles, so the rate halves
    c = costs(contention=2.0, device_s=1e-6)
    p = predict(c, target(cores_per_node=1.0), V100)
    assert p.factor == pytest.approx(2.0, rel=1e-3) and p.per_rank == pytest.approx(1 / (0.004 * 2), rel=1e-3)
    # costs measured on a busy host are brought back to an idle one first
    busy = replace(c, loader_s=0.006, rank_s=0.002, busy_share=1.0)
    assert predict(busy, target(cores_per_node=1.0), V100).per_rank == pytest.approx(p.per_rank, rel=1e-3)


def test_a_cold_read_waits_for_the_latency_and_the_bandwidth():
    c = costs(loader_s=0.0, rank_s=0.0, bytes_per_sample=1e6, requests_per_sample=1.0, device_s=1e-6)
    t = target(workers_per_rank=1, page_cache="cold", storage_read_mb_s=1000.0, storage_latency_ms=9.0)
    p = predict(c, t, V100)  # 1 MB at 1000 MB/s = 1 ms, + 9 ms: 100 samples/s per worker
    assert p.binds == "loader workers" and p.per_rank == pytest.approx(100)
    assert predict(c, replace(t, page_cache="warm"), V100).binds == "device"  # warm: no wait at all


def test_requests_in_flight_raise_the_latency_bound_as_little_s_law_says():
    # no CPU, no transfer: W workers x q in flight / (latency x requests per sample), q = in_flight up to what a
    # batch holds; 2 requests per sample at 4 ms: 125 samples/s per worker one at a time
    c = costs(loader_s=0.0, rank_s=0.0, bytes_per_sample=1e4, requests_per_sample=2.0, device_s=1e-6)
    t = target(workers_per_rank=2, page_cache="cold", storage_latency_ms=4.0, batch_size=16)
    assert predict(c, t, V100).per_rank == pytest.approx(2 * 1 / (0.004 * 2))  # in_flight 1: today's figure
    for depth in (2, 8, 32):
        p = predict(replace(c, in_flight=depth), t, V100)
        assert p.binds == "loader workers" and p.per_rank == pytest.approx(2 * depth / (0.004 * 2))
    # a batch of 16 holds 32 requests: no more can be in flight at once
    assert predict(replace(c, in_flight=64), t, V100).per_rank == pytest.approx(2 * 32 / (0.004 * 2))
    # the transfer is not shared: 10 KB at 10 MB/s stays 1 ms a sample, beside 8 ms / 8 of latency
    bw = replace(t, storage_read_mb_s=10.0, workers_per_rank=1)
    assert predict(replace(c, in_flight=8), bw, V100).per_rank == pytest.approx(1 / (0.001 + 0.001))
    # the store's own capacity caps it: 400 GETs/s over 2 requests a sample
    capped = predict(replace(c, in_flight=8), replace(t, storage_iops=400.0), V100)
    assert capped.binds == "storage ops/s" and capped.per_rank == pytest.approx(200)
    # warm page cache: no wait, in flight or not
    assert predict(replace(c, in_flight=8), replace(t, page_cache="warm"), V100).binds == "device"


def test_nodes_on_shared_storage_share_its_bandwidth():
    c = costs(loader_s=0.0, rank_s=0.0, device_s=1e-6)
    one = target(page_cache="cold", storage_read_mb_s=200.0)
    two = replace(one, nodes=2)
    assert predict(c, one, V100).samples_per_s == pytest.approx(200)
    assert predict(c, two, V100).samples_per_s == pytest.approx(200)  # the same storage, twice the ranks
    assert predict(c, two, V100).binds == "storage bandwidth"
    ops = replace(one, storage_iops=50.0, storage_read_mb_s=0.0)
    assert predict(c, ops, V100).binds == "storage ops/s" and predict(c, ops, V100).per_rank == pytest.approx(50)


def test_ranks_wait_for_the_slowest():
    c = costs(step_imbalance=1.25)
    assert predict(c, target(gpus_per_node=2), V100).per_rank == pytest.approx(1000 / 1.25)
    assert predict(c, target(gpus_per_node=1), V100).per_rank == pytest.approx(1000)  # alone: none to wait for


def test_the_workers_that_make_the_device_bind():
    # the device takes 1000 samples/s; each worker gives 1 / 0.003: 3 workers give 1000
    assert predict(costs(), target(workers_per_rank=1), V100).workers_for_device == 3
    # 1 core for 1 rank: the cores bind whatever the workers
    assert predict(costs(), target(cores_per_node=1.0), V100).workers_for_device is None


def test_capacity_is_the_accelerators_a_node_keeps_at_au_90():
    # AU 90% needs 900 samples/s per rank: 3.6 cores each; 32 cores keep 8 (9 would need 32.4)
    assert capacity(costs(), target(cores_per_node=32.0), V100) == 8
    assert capacity(costs(loader_s=1.0), target(cores_per_node=32.0), V100) == 0


def test_the_catalogue_gives_the_device_time_when_none_was_measured():
    c = costs(device_s=None, loader_s=0.0, rank_s=0.0, padded_pixels_per_sample=224 * 224)
    per_sample = (V100.step_overhead_s + 32 / V100.resnet50_img_per_s) / 32
    assert predict(c, target(), V100).per_rank == pytest.approx(1 / per_sample)


def test_the_recommendation_adds_workers_until_the_device_binds():
    r = recommend(costs(), target(workers_per_rank=1), V100)
    assert r.workers == 3 and r.next_limit == "device" and r.samples_per_s == pytest.approx(1000)
    assert r.now_samples_per_s == pytest.approx(1 / 0.003) and "workers 3" in r.text()


def test_device_preprocessing_when_decode_binds_the_cores():
    c = costs(loader_s=0.01, stages={"read": 0.001, "decode": 0.008, "transform": 0.001})
    r = recommend(c, target(cores_per_node=2.0, workers_per_rank=1), V100)
    assert r.preprocess == "device" and r.samples_per_s > r.now_samples_per_s


def test_the_devices_decode_is_costed_and_the_caveat_printed():
    c = costs(loader_s=0.01, stages={"read": 0.001, "decode": 0.008, "transform": 0.001},
              padded_pixels_per_sample=160 * 160.0)
    free = recommend(costs(loader_s=0.01, stages=c.stages), target(cores_per_node=2.0, workers_per_rank=1), V100)
    bound = recommend(c, target(cores_per_node=2.0, workers_per_rank=1), V100)
    told = recommend(c, target(cores_per_node=2.0, workers_per_rank=1), V100, source_pixels_per_sample=4e6)
    assert bound.preprocess == "device" and "decoded size, a lower bound" in bound.text()
    assert "no pixel count" in free.text()  # nothing to cost it with: said so, never silently free
    assert told.samples_per_s < bound.samples_per_s  # larger sources cost the device more
    assert not any("lower bound" in n or "no pixel count" in n for n in told.notes)


def test_a_case_scales_what_it_changes_by_the_measured_ratios():
    base = checkcases.CheckCase("calibration")
    bench = checkcases.Bench(read_s={"raw": 2e-5, "mmap": 1e-5}, decode_s={(160, "pil"): 4e-4, (224, "pil"): 6e-4},
                             area={160: 100.0, 224: 200.0})
    c = costs(stages={"read": 1e-4, "decode": 2e-3, "collate": 1e-4, "send": 1e-4})
    mmap = checkcases.case_costs(c, base, replace(base, storage="mmap"), bench)
    assert mmap.stages["read"] == pytest.approx(5e-5) and mmap.stages["decode"] == pytest.approx(2e-3)
    big = checkcases.case_costs(c, base, replace(base, image_size=224), bench)
    assert big.stages["decode"] == pytest.approx(3e-3) and big.stages["collate"] == pytest.approx(2e-4)
    assert big.loader_s == pytest.approx(1e-4 + 3e-3 + 2e-4 + 2e-4)


def test_the_check_predicts_from_the_cores_and_corrects_for_the_outside_load_it_measured():
    base = checkcases.CheckCase("calibration")
    bench = checkcases.Bench(read_s={}, decode_s={}, area={})
    c = costs(device_s=1e-6)
    idle = checkcases.predict_case(c, base, base, bench, V100, 2.0).samples_per_s
    one = checkcases.predict_case(c, base, base, bench, V100, 1.0).samples_per_s
    assert one < idle  # the absolute model on 1 CPU: the worker and the rank share it
    half = checkcases.predict_case(c, base, base, bench, V100, 2.0, outside_pct=50.0).samples_per_s
    assert half == pytest.approx(one, rel=1e-6)  # half of 2 CPUs taken by others: 1 CPU's worth left
    # a second worker with 1 CPU's worth: the CPU binds, not the workers (the model's loader CPU bound)
    two = checkcases.predict_case(c, base, replace(base, workers=2), bench, V100, 2.0, 50.0)
    assert two.samples_per_s == pytest.approx(half, rel=1e-6) and two.binds == "loader CPU"
    assert checkcases.predict_case(c, base, replace(base, workers=2), bench, V100, 2.0).samples_per_s > idle


def test_a_case_its_calibration_predicts_the_same_is_a_copy():
    assert predcases.is_copy(1010.0, 1000.0) and not predcases.is_copy(1030.0, 1000.0)
    assert not predcases.is_copy(5.0, 0.0)


def test_the_pairings_cross_the_one_cpu_boundary_both_ways():
    base = checkcases.CheckCase("calibration", workers=1)
    all_cases = predcases.cases(base, 224, None, allowance=2)
    assert all_cases[-1].name == predcases.ONE_CPU and all_cases[-1].cpus == 1
    pairs = predcases.pairings(all_cases, 2)
    crossing = [(p.source, p.case) for p in pairs
                if {p.source, p.case} & {predcases.ONE_CPU} and p.source != p.case]
    assert ("calibration", predcases.ONE_CPU) in crossing and (predcases.ONE_CPU, "calibration") in crossing
    assert (predcases.ONE_CPU, "workers 1 -> 2") in crossing and (predcases.ONE_CPU, "ranks 1 -> 2") in crossing
    assert pairs[0] == predcases.Pairing("calibration", "calibration", "calibration")
    assert predcases.ONE_CPU not in {c.name for c in predcases.cases(base, 224, None, allowance=1)}


def test_the_error_summary():
    s = predcases.summary([5.0, -12.0, 20.0, None])
    assert s == {"median_abs_error_pct": 12.0, "max_abs_error_pct": 20.0, "within_15": 2, "cases": 3}


def test_the_rank_own_host_work_binds_before_the_device():
    p = predict(costs(rank_s=0.002), target(), V100)  # 0.002 s of host work per sample, device 0.001
    assert p.binds == "rank host" and p.per_rank == pytest.approx(500) and p.au_pct == pytest.approx(50)
    assert p.workers_for_device is None  # no number of workers makes the device bind
