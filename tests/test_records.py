"""The result model: cells.jsonl lines <-> CellResult (old lines included), figures by attribute, merging
repeats (failed ones visible), and the line built from the ranks' records."""
from __future__ import annotations

import copy
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.results import rundir
from harness.results.cellresult import (
    SCHEMA_VERSION,
    CellResult,
    CellSummary,
    Figures,
    cell_line,
    merge_repeats,
    relative_to_probe,
    summary_text,
)

FIXTURES = Path(__file__).parent / "fixtures"


def fixture_lines(name: str = "cells_4xV100.jsonl") -> list[dict]:
    return [json.loads(line) for line in (FIXTURES / name).read_text().splitlines() if line.strip()]


def test_old_line_without_schema_reads_as_version_1_and_round_trips():
    for line in fixture_lines() + fixture_lines("cells_1xV100.jsonl"):
        assert "schema" not in line and "names" not in line  # recorded by an older harness
        r = CellResult.from_json(line)
        assert r.schema == 1 and r.repeat == 0 and r.page_cache is None and r.extra == {}
        assert r.figures.throughput == line["figures"]["throughput"] and r.figures.extra == {}
        out = r.to_json()
        assert {k: out[k] for k in line} == line  # nothing read is lost or changed
        assert set(out) - set(line) == {"schema", "names", "repeat", "page_cache", "decomposition"}
        assert CellResult.from_json(json.loads(json.dumps(out))) == r  # and it reads back the same


def test_names_of_old_lines_come_from_labels_and_params():
    r = CellResult.from_json(fixture_lines()[6])
    assert r.label("cache") == "lru(capacity_mb=64,level=stored,scope=worker)"
    assert r.names == {"batching": "dynamic", "cache": "lru", "sampler": "default", "storage": "raw"}
    assert r.name("batching") == "dynamic" and r.label("batching") == "dynamic(max_batch=64)"
    assert r.name("no-such-axis") == "" and r.label("no-such-axis") == ""


def test_unknown_keys_are_kept_and_written_back():
    line = dict(fixture_lines()[0], schema=1, future="kept", names={"storage": "raw"})
    line["figures"] = dict(line["figures"], future_figure=3.5, nvml_util_pct=None)
    r = CellResult.from_json(line)
    assert r.extra == {"future": "kept"} and r.figures.extra == {"future_figure": 3.5}
    assert r.figures.get("future_figure") == 3.5 and r.figures.get("h2d_pct", 0) == 0
    assert r.figures.nvml_util_pct is None and r.figures.get("nvml_util_pct", "-") == "-"
    assert r.to_json() == dict(line, repeat=0, page_cache=None, decomposition=None)  # null figure kept


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
    out = relative_to_probe(rs, {"ideal_samples_per_s": [50.0, 100.0]})
    assert [r.figures.vs_probe for r in out] == [2.0, 3.0, None]
    assert rs[0].figures.vs_probe is None  # the inputs are not changed
    assert out[0].to_json()["figures"]["vs_probe"] == 2.0


def test_cell_line_writes_the_schema_and_the_names():
    choices = (SimpleNamespace(axis="storage", name="raw", label="raw", params=()),
               SimpleNamespace(axis="batching", name="dynamic", label="dynamic(max_batch=64)",
                               params=(("max_batch", 64),)))
    cell = SimpleNamespace(id="storage=raw,batching=dynamic(max_batch=64)", choices=choices,
                           strategies=lambda: {c.axis: c.label for c in choices})
    scenario = SimpleNamespace(name="t", training=SimpleNamespace(workload="pixels", batch_size=4),
                               dataset=SimpleNamespace(samples=4))
    rank = {"rank": 0, "wait": [0.1], "h2d": [0.0], "peer_wait": [0.0], "device": [0.3], "overhead": [0.0],
            "cost": [1.0], "step": [0.4], "steps": 1,
            "window_s": 0.4, "samples": 4, "padded_pixels": 10, "real_pixels": 8, "nbytes": 100,
            "host_pss_peak": 1e8, "host_rss_peak": 2e8, "device_peak_bytes": 1e9, "overruns": 0,
            "batch_sizes": [4], "oom_events": 0, "shadow_steps": 0, "error": None, "completed_epochs": 1,
            "consumed": {0: [0, 1, 2, 3]}}
    line = cell_line(scenario, cell, "V100 (emulated)", True, [rank], 1.23456)
    assert line["schema"] == SCHEMA_VERSION and line["names"] == {"storage": "raw", "batching": "dynamic"}
    assert line["params"] == {"storage": {}, "batching": {"max_batch": 64}} and line["elapsed_s"] == 1.235
    assert line["figures"]["throughput"] == pytest.approx(10.0) and line["coverage"]["ok"]
    assert "consumed" not in line["ranks"][0]
    json.dumps(line)
    assert summary_text(line) == "    10 samples/s, stall 25%, AU 75% (1.2 s)"
    assert summary_text(dict(line, error="OOM: too big")) == "    OOM: too big (1.2 s)"


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
