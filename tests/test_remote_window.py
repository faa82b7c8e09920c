"""The remote figures of one visit over its measured window, from the readers' time-stamped counters, into
the visit's cells.jsonl line and the report's remote table; a line without them reads and reports as before."""
from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import pytest

from harness.config.matrix import Cell
from harness.config.scenario import StrategyChoice
from harness.measure import remotecounters
from harness.measure.rankrecord import RankRecord
from harness.report.remotetable import remote_table
from harness.results.cellresult import CellResult, cell_line
from harness.results.repeats import merge_repeats
from strategies.remote.s3client import latency_bin


def _line(t: float, samples: int, requests: int, slow: int = 0, hits: int = 0, misses: int = 0) -> str:
    bins = {str(latency_bin(0.020)): requests - slow, **({str(latency_bin(0.9)): slow} if slow else {})}
    return json.dumps({"label": "s3(x)", "client": "obstore", "t": t, "samples": samples, "requests": requests,
                       "bytes": 50_000 * requests, "lists": 0, "retries": 1 if t > 104 else 0,
                       "wait_s": samples / 200, "latency_bins": bins, "disk_hits": hits,
                       "disk_misses": misses}) + "\n"


def _rank(window_s: float = 4.0) -> RankRecord:
    return RankRecord(rank=0, wait=[0.1], h2d=[0.0], peer_wait=[0.0], device=[0.3], overhead=[0.0], cost=[1.0],
                      step=[0.4], steps=1, window_s=window_s, samples=64, batch_sizes=[4],
                      page_cache={"state": "as-is"}, setup_s={"warmup": 1.0, "close": 0.5, "gather": 0.5})


@pytest.fixture
def stats(tmp_path):
    """The run's counters folder with two workers' counters: warm-up to t=100 (slow first requests, tier
    misses), the window 100-104, then the prefetch after it (t=105)."""
    (tmp_path / "1-a.jsonl").write_text(_line(99, 16, 16, slow=16, misses=4) + _line(102, 48, 24, 16, 6, 6)
                                        + _line(104, 80, 32, 16, 12, 8) + _line(105, 96, 200, 16, 12, 100))
    (tmp_path / "2-b.jsonl").write_text(_line(100, 16, 16, slow=16, misses=4) + _line(103.5, 48, 24, 16, 14, 6))
    return tmp_path


def test_a_visit_s_figures_cover_its_window_only(stats):
    # the gather ended at 105: the window ended close + gather = 1 s before, at 104, and began 4 s before that
    assert remotecounters.visit_window([_rank()], now=105.0) == (100.0, 104.0)
    got = remotecounters.of_visit(stats, [_rank()], now=105.0)
    # worker 1: 64 samples, 16 requests, 12 hits, 4 misses; worker 2: 32 samples, 8 requests, 14 hits, 2 misses
    assert got["remote_requests_per_sample"] == pytest.approx(24 / 96)
    assert got["remote_mb_per_sample"] == pytest.approx(24 * 50_000 / 1e6 / 96)
    assert got["remote_latency_p99_ms"] == pytest.approx(20, rel=0.05)  # the warm-up's 0.9 s requests left out
    assert got["remote_wait_ms_per_sample"] == pytest.approx(5.0)
    assert got["disk_hit_pct"] == pytest.approx(100 * 26 / 32)
    assert got["remote_retries"] == 0 and got["remote_lists_per_sample"] == 0


def test_rank_0s_own_stamp_of_the_window_end_is_used_where_the_record_carries_it(stats):
    # the record and the samplers' stop took 3 s after the window under load: the gather then ended at 108, and
    # `now` less close and gather would put the window at 103-107, after most of its reads
    late = dataclasses.replace(_rank(), window_end_at=104.0)
    assert remotecounters.visit_window([late], now=108.0) == (100.0, 104.0)
    assert remotecounters.of_visit(stats, [late], now=108.0) == remotecounters.of_visit(stats, [_rank()], now=105.0)
    assert "window_end_at" not in late.to_json()  # it crosses to rank 0 and is never written


def test_no_figures_without_the_counters_folder_or_a_window(stats):
    assert remotecounters.of_visit(stats, [_rank(window_s=0.0)], now=105.0) == {}
    idle = RankRecord(window_s=4.0, phases={"warm": None}, setup_s={})
    assert remotecounters.of_visit(stats, [idle], now=105.0) == {}
    assert remotecounters.of_visit(None, [_rank()], now=105.0) == {}
    assert remotecounters.of_visit(stats / "gone", [_rank()], now=105.0) == {}


def test_the_figures_go_into_the_line_and_the_remote_table(stats):
    cell = Cell((StrategyChoice("storage", "s3", (("format", "webdataset"),)),))
    scenario = SimpleNamespace(name="t", training=SimpleNamespace(workload="pixels", batch_size=4),
                               dataset=SimpleNamespace(samples=64))
    remote = remotecounters.of_visit(stats, [_rank()], now=105.0)
    line = cell_line(scenario, cell, "V100 (emulated)", True, [_rank()], 8.0, remote=remote)
    assert line["figures"]["remote_requests_per_sample"] == pytest.approx(0.25)
    read = CellResult.from_json(json.loads(json.dumps(line)))
    assert read.figures.disk_hit_pct == pytest.approx(81.25) and read.to_json() == line
    table = remote_table(merge_repeats([read]))
    assert table.rows == [["s3", "0.25", "0.013", "0.000", "19.7", "19.7", "5.00", "81", "0"]]
    local = CellResult.from_json(cell_line(scenario, cell, "V100 (emulated)", True, [_rank()], 8.0))
    assert "remote_requests_per_sample" not in local.to_json()["figures"]
    assert remote_table(merge_repeats([local])).rows == []  # local data: no remote table
