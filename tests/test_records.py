"""The result model: cells.jsonl lines <-> CellResult (old lines upgraded on read and written back as read),
figures by attribute, merging repeats (failed ones visible), and the line built from the ranks' records."""
from __future__ import annotations

import copy
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.config.choices import StrategyChoice
from harness.config.matrix import Cell
from harness.measure.rankrecord import RankRecord
from harness.results import rundir
from harness.results.cellparts import Coverage
from harness.results.cellresult import RECORDED_STEPS, SCHEMA_VERSION, CellResult, Figures, cell_line, summary_text
from harness.results.probeline import ProbeSeries
from harness.results.repeats import CellSummary, merge_repeats
from harness.results.vsprobe import relative_to_probe

FIXTURES = Path(__file__).parent / "fixtures"


def fixture_lines(name: str = "cells_4xV100.jsonl") -> list[dict]:
    return [json.loads(line) for line in (FIXTURES / name).read_text().splitlines() if line.strip()]


def test_old_line_without_schema_reads_as_version_1_and_round_trips():
    for line in fixture_lines() + fixture_lines("cells_1xV100.jsonl"):
        assert "schema" not in line and "names" not in line  # recorded by an older harness
        original = copy.deepcopy(line)
        r = CellResult.from_json(line)
        assert r.schema == 1 and r.repeat == 0 and r.page_cache is None and r.extra == {}
        assert r.figures.throughput == line["figures"]["throughput"] and r.figures.extra == {}
        assert r.to_json() == line == original  # written back as read: nothing lost, changed or added
        assert CellResult.from_json(json.loads(json.dumps(r.to_json()))) == r  # and it reads back the same


def test_old_line_is_upgraded_on_read_in_memory_only():
    line = fixture_lines()[0]
    r = CellResult.from_json(line)
    f = r.figures
    assert "window_imbalance" not in line["figures"] and f.window_imbalance == line["figures"]["imbalance"]
    assert r.legacy_figures == {"au_pct"} and f.au_pct == line["figures"]["au_pct"]  # kept, marked old
    assert "throughput_ci" not in line["figures"]  # batch means over the recorded steps, said so
    low, high = f.throughput_ci
    assert low < f.throughput < high and f.throughput_ci_label == "95% CI, batch means, 10 blocks" + RECORDED_STEPS
    assert r.names["storage"] == "raw" and "names" not in r.to_json()
    assert set(r.to_json()["figures"]) == set(line["figures"])  # nothing derived is written back
    assert all(isinstance(rank, RankRecord) and "compute" in rank.extra for rank in r.ranks)  # v1 keys kept
    assert r.ranks[0].peer_wait == [] and "peer_wait" not in r.ranks[0].to_json()
    errored = CellResult.from_json(dict(line, error="OOM: x"))
    assert errored.figures.throughput_ci is None  # an unmeasured line gets no interval


def test_current_lines_round_trip_and_need_no_upgrade():
    lines = fixture_lines("cells_schema2.jsonl")
    for line in lines:
        original = copy.deepcopy(line)
        r = CellResult.from_json(line)
        assert r.schema == SCHEMA_VERSION and r.legacy_figures == frozenset()
        assert r.to_json() == line == original
        derived = {k: v for k, v in r.figures.values().items() if k not in line["figures"]}
        assert set(derived) <= {"read_amplification"}  # only the amplification these lines predate
        assert {k: v for k, v in r.figures.values().items() if k in line["figures"]} == line["figures"]
    measured, cached, decomposed, failed = (CellResult.from_json(line) for line in lines)
    assert isinstance(measured.coverage, Coverage) and measured.coverage.ok and measured.coverage.epochs[0].complete
    assert measured.cache is None and cached.cache.scope == "worker" and cached.cache.hits > 0
    assert measured.page_cache.state == "as-is" and measured.decomposition is None
    pc, d = decomposed.page_cache, decomposed.decomposition
    assert pc.state == "cold" and pc.verified is True and pc.check.device_bytes > 0 and pc.bytes is None
    assert d.error is None and d.compute_s > 0 and d.prep_stall_pct + d.fetch_stall_pct + d.compute_pct \
        == pytest.approx(100)
    assert set(decomposed.ranks[0].phases) == {"compute", "warm", "cold"}
    assert decomposed.ranks[0].phases["cold"].window_s == decomposed.ranks[0].window_s
    assert failed.error and failed.figures == Figures() and failed.ranks == [] and not failed.measured


def test_figures_by_name_refuse_a_name_that_is_no_figure():
    f = CellResult.from_json(fixture_lines("cells_schema2.jsonl")[0]).figures
    assert f.get("throughput") == f.throughput and f.get("gpu_compute_au_pct", "-") == "-"
    with pytest.raises(KeyError, match="throughput_typo"):
        f.get("throughput_typo")
    with pytest.raises(AttributeError):
        f.throughput_typo  # noqa: B018


def test_names_of_old_lines_come_from_labels_and_params():
    r = CellResult.from_json(fixture_lines()[6])
    assert r.label("cache") == "lru(capacity_mb=64,level=stored,scope=worker)"
    assert r.names == {"batching": "dynamic", "cache": "lru", "sampler": "default", "storage": "raw"}
    assert r.name("batching") == "dynamic" and r.label("batching") == "dynamic(max_batch=64)"
    assert r.name("no-such-axis") == "" and r.label("no-such-axis") == ""


def test_unknown_keys_are_kept_and_written_back():
    line = dict(fixture_lines()[0], schema=1, future="kept", names={"storage": "raw"})
    line["figures"] = dict(line["figures"], future_figure=3.5, nvml_util_pct=None)
    line["ranks"][0] = dict(line["ranks"][0], future_rank_key=[1, 2])
    line["coverage"] = dict(line["coverage"], future_coverage_key="x")
    r = CellResult.from_json(line)
    assert r.extra == {"future": "kept"} and r.figures.extra == {"future_figure": 3.5}
    assert r.ranks[0].extra["future_rank_key"] == [1, 2] and r.coverage.extra == {"future_coverage_key": "x"}
    with pytest.raises(KeyError):  # not a figure this version knows: in extra, not by name
        r.figures.get("future_figure")
    assert r.figures.get("h2d_pct", 0) == 0
    assert r.figures.nvml_util_pct is None and r.figures.get("nvml_util_pct", "-") == "-"
    assert r.to_json() == line  # null figure kept, nothing added


def test_a_newer_schema_or_a_non_line_is_refused():
    with pytest.raises(ValueError, match=f"reads up to {SCHEMA_VERSION}"):
        CellResult.from_json({"cell": "c", "schema": SCHEMA_VERSION + 1})
    with pytest.raises(ValueError, match="not a cells.jsonl line"):
        CellResult.from_json(["cell"])


def test_a_minimal_line_gets_defaults():
    r = CellResult.from_json({"cell": "storage=raw"})
    assert r.figures == Figures() and not r.measured and r.contract_ok and r.ranks == []
    assert CellResult.from_json({"cell": "c", "figures": {"throughput": 5.0}}).measured
    assert not CellResult.from_json({"cell": "c", "error": "x", "figures": {"throughput": 5.0}}).measured


def repeats_of(line: dict, throughputs: list[float | None]) -> list[CellResult]:
    """One result per repeat; None = a failed repeat (an error, no figures)."""
    out = []
    for i, thr in enumerate(throughputs):
        rep = copy.deepcopy(line)
        rep["repeat"] = i
        if thr is None:
            rep.update(error=f"OOM: repeat {i} did not fit", figures={"ranks": 4, "window_steps": 0})
        else:
            rep["figures"]["throughput"] = thr
        out.append(CellResult.from_json(rep))
    return out


def test_merging_repeats_shows_the_failed_ones():
    a, b = fixture_lines()[:2]
    merged = merge_repeats(repeats_of(a, [100.0, None, 300.0, 200.0]) + repeats_of(b, [None, None]))
    assert [m.cell for m in merged] == [a["cell"], b["cell"]] and all(isinstance(m, CellSummary) for m in merged)
    first, second = merged
    assert first.repeats == 3 and first.failed_repeats == 1 and first.total_repeats == 4
    assert first.repeat_errors == ["OOM: repeat 1 did not fit"] and first.measured and first.error is None
    assert first.figures.throughput == 200.0 and first.throughput_repeats == [100.0, 300.0, 200.0]
    assert first.throughput_summary["n"] == 3 and first.throughput_summary["median"] == 200.0
    assert first.figures.window_steps == 30 and isinstance(first.figures.window_steps, int)  # integers stay
    assert len(first.ranks) == 3 * 4  # the measured repeats' ranks pooled
    assert second.repeats == 0 and second.failed_repeats == 2 and not second.measured
    assert second.error == "OOM: repeat 0 did not fit" and second.throughput_summary is None
    assert merge_repeats(merged) == merged  # idempotent


def test_one_repeat_is_kept_as_it_is():
    (only,) = merge_repeats([CellResult.from_json(fixture_lines()[3])])
    assert only.repeats == 1 and only.failed_repeats == 0 and only.throughput_summary is None
    assert only.figures == CellResult.from_json(fixture_lines()[3]).figures


def test_relative_to_probe_uses_the_repeats_probe():
    rs = repeats_of(fixture_lines()[0], [100.0, 300.0, None])
    out = relative_to_probe(rs, ProbeSeries([50.0, 100.0]))
    assert [r.figures.vs_probe for r in out] == [2.0, 3.0, None]
    assert rs[0].figures.vs_probe is None  # the inputs are not changed
    assert out[0].to_json()["figures"]["vs_probe"] == 2.0


def test_cell_line_writes_the_schema_and_the_names():
    cell = Cell((StrategyChoice("storage", "raw"), StrategyChoice("batching", "dynamic", (("max_batch", 64),))))
    assert cell.id == "storage=raw,batching=dynamic(max_batch=64)"
    scenario = SimpleNamespace(name="t", training=SimpleNamespace(workload="pixels", batch_size=4),
                               dataset=SimpleNamespace(samples=4))
    rank = RankRecord(rank=0, wait=[0.1], h2d=[0.0], peer_wait=[0.0], device=[0.3], overhead=[0.0], cost=[1.0],
                      step=[0.4], steps=1, window_s=0.4, samples=4, padded_pixels=10, real_pixels=8, nbytes=100,
                      host_pss_peak=100_000_000, host_rss_peak=200_000_000, device_peak_bytes=1_000_000_000,
                      batch_sizes=[4], completed_epochs=1, workers=1, page_cache={"state": "as-is"},
                      consumed={0: [0, 1, 2, 3]})
    line = cell_line(scenario, cell, "V100 (emulated)", True, [rank], 1.23456)
    assert line["schema"] == SCHEMA_VERSION and line["names"] == {"storage": "raw", "batching": "dynamic"}
    assert line["params"] == {"storage": {}, "batching": {"max_batch": 64}} and line["elapsed_s"] == 1.235
    assert line["figures"]["throughput"] == pytest.approx(10.0) and line["coverage"]["ok"]
    assert line["page_cache"] == {"state": "as-is"} and line["cache"] is None and line["decomposition"] is None
    assert set(line) == set(CellResult.KEYS) and line["advice"] == "random"  # raw's readers, default sampler
    assert "consumed" not in line["ranks"][0] and "phases" not in line["ranks"][0]  # phases: --decompose only
    current = fixture_lines("cells_schema2.jsonl")[0]["ranks"][0]
    assert set(line["ranks"][0]) == set(current) | {"setup_s"}  # every key a run writes (setup_s: newer)
    assert line["figures"]["window_share_pct"] == pytest.approx(32.4, abs=0.05)
    assert line["figures"]["setup_s"] == pytest.approx(1.235 - 0.4, abs=0.002)
    json.dumps(line)
    assert summary_text(line) == "    10 samples/s, stall 25%, AU 75% (1.2 s)"
    assert summary_text(dict(line, error="OOM: too big")) == "    OOM: too big (1.2 s)"


def test_a_failed_line_has_the_identity_of_a_measured_one():
    from harness.run.supervisor import failed_line

    cell = Cell((StrategyChoice("storage", "mmap", (("advice", "normal"),)),))
    scenario = SimpleNamespace(name="t", world_size=1, training=SimpleNamespace(workload="pixels", batch_size=4),
                               dataset=SimpleNamespace(samples=4))
    config = SimpleNamespace(cells=[cell], scenario=scenario, device_name="V100 (emulated)", device="emulated")
    failed = failed_line(config, (2, 0), "rank 0 died: SIGKILL", 3.21)
    rank = RankRecord(step=[0.1], wait=[0.1], batch_sizes=[4], steps=1, window_s=0.1, samples=4,
                      page_cache={"state": "as-is"})
    measured = cell_line(scenario, cell, "V100 (emulated)", True, [rank], 1.0, repeat=2)
    identity = ("schema", "scenario", "cell", "strategies", "params", "names", "device", "emulated", "workload",
                "batch_size", "world_size", "repeat", "advice")
    assert {k: failed[k] for k in identity} == {k: measured[k] for k in identity}
    assert failed["names"] == {"storage": "mmap"} and failed["params"] == {"storage": {"advice": "normal"}}
    assert failed["advice"] == "normal"
    assert set(failed) == set(measured) and failed["figures"] == {} and failed["ranks"] == []
    assert failed["error"] == "rank 0 died: SIGKILL" and failed["elapsed_s"] == 3.21


def test_read_results_and_a_broken_line(tmp_path):
    (tmp_path / "cells.jsonl").write_text((FIXTURES / "cells_1xV100.jsonl").read_text())
    rs = rundir.read_results(tmp_path)
    assert [r.name("storage") for r in rs] == ["raw", "mmap", "hdf5"] and rs[0].world_size == 1
    assert rundir.read_results(tmp_path / "nothing-here") == []
    with open(tmp_path / "cells.jsonl", "a") as f:  # a crash cut the last line: skipped, the rest is read
        f.write('{"cell": "half a line')
    assert len(rundir.read_results(tmp_path)) == 3
    with open(tmp_path / "cells.jsonl", "a") as f:  # a broken line with lines after it is an error
        f.write("\n" + (FIXTURES / "cells_1xV100.jsonl").read_text().splitlines()[0] + "\n")
    with pytest.raises(rundir.ResultsError, match=r"cells.jsonl:4 is not valid JSON"):
        rundir.read_results(tmp_path)
