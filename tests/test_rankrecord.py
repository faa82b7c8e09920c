"""A rank's record (harness.measure.rankrecord, a harness.measure.jsonrecord.JsonRecord): its JSON form
round-trips (older keys kept, absent ones left absent), it pickles and crosses a process group's
gather_object, and the five parts are defined once."""
from __future__ import annotations

import copy
import json
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch.distributed as dist

from harness.measure import jsonrecord
from harness.measure.rankrecord import PARTS, SHOWN_PARTS, Nvml, Phase, RankCache, RankRecord
from harness.measure.steprecorder import CacheTally, StepRecorder
from harness.results import metrics
from harness.results.cellparts import CacheFigures, Decomposition, PageCache

FIXTURES = Path(__file__).parent / "fixtures"


def lines(name: str) -> list[dict]:
    return [json.loads(line) for line in (FIXTURES / name).read_text().splitlines() if line.strip()]


def a_record() -> RankRecord:
    """A record as a rank builds it: from the recorder, in code (no JSON read)."""
    rec = StepRecorder(3)
    for i in range(3):
        rec.add(wait=0.01 * i, h2d=0.001, peer_wait=0.002, device=0.05, overhead=0.003, padded=0.04, samples=4,
                cost=10.0 + i, padded_pixels=100, real_pixels=80, nbytes=1000)
    return RankRecord(**rec.as_record(), rank=1, steps=3, window_s=0.2, host_pss_peak=10**8, workers=2,
                      loader="processes", cache=RankCache(hits=3.0, misses=1.0, processes=2, scope="worker"),
                      nvml=Nvml(nvml_util_mean_pct=50.0, nvml_util_max_pct=90, nvml_samples=3, nvml_interval_s=0.05),
                      page_cache={"state": "as-is"}, param_digest="abc", consumed={0: [1, 3, 5]})


def test_a_record_built_in_code_writes_every_key_but_the_consumed_indices():
    r = a_record()
    out = r.to_json()
    assert "consumed" not in out and "phases" not in out  # phases only with --decompose
    # phases only with --decompose; the kernel-busy time only when profiled on a GPU; launch, the epoch starts
    # and the reference readings and the main thread's CPU where recorded
    assert set(out) == set(RankRecord.json_keys()) - {"phases", "stages", "kernel_busy_s", "kernel_span_s", "launch",
                                                      "epoch_starts", "reference", "rank_main_cpu_s"}
    assert out["step"] == [round(0.001 + 0.002 + 0.05 + 0.003 + 0.01 * i, 6) for i in range(3)]
    assert out["cache"] == {"hits": 3.0, "misses": 1.0, "evictions": 0.0, "resident_bytes": 0.0, "processes": 2,
                            "scope": "worker"}
    json.dumps(out)
    back = RankRecord.from_json(json.loads(json.dumps(out)))
    assert back.to_json() == out and back.cache == r.cache and back.nvml == r.nvml
    assert back.consumed == {} and back == RankRecord(**{**r.__dict__, "consumed": {}})
    r.phases = {"cold": r.phase_summary()}
    assert r.to_json()["phases"] == {"cold": {"window_s": 0.2, "steps": 3, "samples": 12, "error": None}}
    assert RankRecord.from_json(r.to_json()).phases["cold"] == Phase(window_s=0.2, steps=3, samples=12)


def test_every_rank_of_the_fixtures_round_trips():
    for name in ("cells_schema2.jsonl", "cells_4xV100.jsonl", "cells_1xV100.jsonl"):
        for line in lines(name):
            for rank in line["ranks"]:
                original = copy.deepcopy(rank)
                r = RankRecord.from_json(rank)
                assert r.to_json() == rank == original
    old = RankRecord.from_json(lines("cells_1xV100.jsonl")[0]["ranks"][0])
    assert set(old.extra) == {"compute", "sync"} and old.device == [] and "device" not in old.to_json()


def test_a_record_pickles_with_its_indices():
    r = a_record()
    back = pickle.loads(pickle.dumps(r))
    assert back == r and back.consumed == {0: [1, 3, 5]} and back.to_json() == r.to_json()
    read = RankRecord.from_json(lines("cells_1xV100.jsonl")[0]["ranks"][0])
    assert pickle.loads(pickle.dumps(read)).to_json() == read.to_json()  # what it read stays what it writes


def test_a_record_crosses_gather_object():
    """The records reach rank 0 through torch.distributed.gather_object (pickle), here in a one-rank group."""
    if dist.is_initialized():
        pytest.skip("a process group already exists in this process")
    from harness.run.launch import free_port

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    try:
        gathered = [None]
        dist.gather_object(a_record(), gathered, dst=0)
    finally:
        dist.destroy_process_group()
    (r,) = gathered
    assert isinstance(r, RankRecord) and r == a_record() and isinstance(r.cache, RankCache)
    assert metrics.coverage([r], 6).epochs[0].unique == 3  # the indices came along


def test_the_five_parts_are_defined_once():
    assert StepRecorder.PARTS == tuple(p.name for p in PARTS) == ("wait", "h2d", "peer_wait", "device", "overhead")
    assert sorted(SHOWN_PARTS, key=PARTS.index) == list(PARTS)
    figures = metrics.accounting([a_record()])
    assert set(figures) == {p.figure for p in PARTS} | {"stall_max_pct"}
    assert sum(figures[p.figure] for p in PARTS) == pytest.approx(100)
    assert len({p.colour for p in PARTS}) == len({p.label for p in PARTS}) == 5


def test_cache_tally_gives_a_typed_rank_cache():
    tally = CacheTally()
    tally.update({"key": "w0", "hits": 4, "misses": 1, "evictions": 0, "resident_bytes": 10, "scope": "worker"})
    tally.mark_window()
    tally.update({"key": "w0", "hits": 10, "misses": 2, "evictions": 1, "resident_bytes": 30, "scope": "worker"})
    cache = tally.record()
    assert cache == RankCache(hits=6.0, misses=1.0, evictions=1.0, resident_bytes=30.0, processes=1, scope="worker")
    cell = metrics.cache_figures([RankRecord(cache=cache), RankRecord(cache=cache)])
    assert isinstance(cell, CacheFigures) and cell.hits == 12 and cell.hit_pct == pytest.approx(12 / 14 * 100)
    assert CacheTally().record() is None


def test_json_records_write_back_what_they_read():
    warm = {"state": "warm", "bytes": 10, "check": {"path": "/x", "bytes": 4, "seconds": 0.1, "device_bytes": None,
                                                    "mb_s": 40.0}}
    for obj in (warm, {"state": "as-is"}, {"state": "cold", "verified": False, "check": warm["check"], "new": 1}):
        assert PageCache.from_json(obj).to_json() == obj
    assert PageCache(state="in-memory").to_json() == {"state": "in-memory"}  # built in code: unset parts left out
    assert Decomposition(error="no steps").to_json() == {"error": "no steps"}
    assert Decomposition.from_json({"error": None}).to_json() == {"error": None}  # a null read stays
    with pytest.raises(ValueError, match="expected a JSON object"):
        RankRecord.from_json([1, 2])
    assert jsonrecord.plain({"a": [RankCache()], "b": (1, 2)}) == {"a": [RankCache().to_json()], "b": (1, 2)}


def test_metrics_read_the_records_not_dicts():
    r = a_record()
    f = metrics.cell_figures([r])
    assert f["samples"] == 12 and f["nvml_util_pct"] == 50.0 and f["window_steps"] == 3
    assert f["mean_batch"] == 4 and f["cost_imbalance"] == pytest.approx(1.0)
    assert np.isclose(f["device_samples_per_s"], 12 / 0.15)
