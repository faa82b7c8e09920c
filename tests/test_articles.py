"""The articles' tables on real recorded runs (tests/fixtures) and on tiny hand-made cells."""
from __future__ import annotations

import json
from dataclasses import astuple
from pathlib import Path

import pytest

from harness.report import report
from harness.report.articles import (
    article_tables,
    fixed_vs_dynamic_table,
    ladder_table,
    note_lines,
    ranking_table,
    scaling_table,
)
from harness.report.tables import render_tables
from harness.results.cellresult import CellResult
from harness.results.repeats import merge_repeats

FIXTURES = Path(__file__).parent / "fixtures"


def load(name: str) -> list[CellResult]:
    return [CellResult.from_json(json.loads(line)) for line in (FIXTURES / name).read_text().splitlines()
            if line.strip()]


@pytest.fixture(scope="module")
def cells_4x():
    return load("cells_4xV100.jsonl")


@pytest.fixture(scope="module")
def cells_1x():
    return load("cells_1xV100.jsonl")


def row_of(rows: list[list], first: str) -> list:
    (row,) = [r for r in rows if r[0] == first]
    return row


def test_scaling_efficiency_of_a_stack_on_both_sides(cells_1x, cells_4x):
    title, headers, rows, notes = astuple(scaling_table(cells_1x, cells_4x))
    assert headers == ["storage/cache/batching/sampler", "1 rank samples/s*", "4 ranks samples/s*",
                       "scaling efficiency %"]
    thr = {c.cell: c.figures.throughput for c in cells_1x + cells_4x if c.world_size == 1}
    thr4 = {c.cell: c.figures.throughput for c in cells_4x}
    cell = "storage=raw,cache=none,batching=fixed,sampler=default"
    assert thr[cell] == pytest.approx(439.057, abs=1e-3) and thr4[cell] == pytest.approx(1082.158, abs=1e-3)
    # 1082.158 / (4 x 439.057) = 0.616
    row = row_of(rows, "raw/none/fixed/default")
    assert row[0] == "raw/none/fixed/default" and row[3] == "62"
    assert row[1].startswith("439 [") and row[2].startswith("1082 [")  # every throughput with its interval
    assert notes == ["[low, high] after a throughput: 95% CI, batch means, 10 blocks (from the recorded steps)"]
    assert len(rows) == 24  # the three stacks on both sides first, the 21 measured only at 4 ranks after
    assert [r[0] for r in rows[:3]] == ["raw/none/fixed/default", "mmap/none/fixed/default",
                                        "hdf5/none/fixed/default"]
    assert row_of(rows, "raw/lru/dynamic/balanced")[1] == "-" and row_of(rows, "raw/lru/dynamic/balanced")[3] == "-"


def test_memory_table_fixed_against_dynamic(cells_4x):
    title, headers, rows, notes = astuple(fixed_vs_dynamic_table(cells_4x))
    assert headers == ["storage/cache/sampler", "fixed GB*", "dynamic GB*", "change %", "fixed mean batch",
                       "dynamic mean batch"]
    assert len(rows) == 12
    # the modelled V100: 1.7192 GB at a mean batch of 31.2, 2.5384 GB at 62.4 (batches doubled, memory rose)
    assert row_of(rows, "raw/none/default") == ["raw/none/default", "1.72", "2.54", "+48", "31.2", "62.4"]


def test_ladder_rows_in_order_with_baseline_one(cells_4x):
    title, headers, rows, notes = astuple(ladder_table(cells_4x, dataset_samples=2000))
    assert [r[0] for r in rows] == ["baseline", "+ cache", "+ dynamic batching",
                                    "+ everything (hdf5, balanced sampler)"]
    # the last step is fixed a priori (hdf5), not the best measured of the three storages (raw: 1529)
    assert [r[1] for r in rows] == ["raw/none/fixed/default", "raw/lru/fixed/default", "raw/lru/dynamic/default",
                                    "hdf5/lru/dynamic/balanced"]
    assert headers[2] == "samples/s* [95% CI, batch means, 10 blocks (from the recorded steps)]"
    assert headers[-2] == "speed-up*" and rows[0][-2] == "1.00"
    assert rows[0][2].startswith("1082 [") and rows[0][3] == f"{2000 / 1082.1576764195522:.1f}"
    (everything,) = [c.figures.throughput for c in cells_4x if c.cell.startswith("storage=hdf5,cache=lru")
                     and "dynamic" in c.cell and c.cell.endswith("sampler=balanced")]
    assert rows[3][-2] == f"{everything / 1082.1576764195522:.2f}"
    # vs previous step: + cache overlaps the baseline (a tie), dynamic batching is clear of + cache
    assert [r[-1] for r in rows] == ["-", "tie", "faster", "tie"]
    assert "fixed before measuring" in notes[0] and "tie when they do" in notes[0]
    assert "2000 samples" in ladder_table(cells_4x).title  # inferred from the coverage check when not given


def test_ranking_marks_ties_and_orders_by_rank(cells_4x):
    title, headers, rows, notes = astuple(ranking_table(cells_4x))
    assert len(rows) == 24 and headers[0] == "#" and "[95% CI, batch means, 10 blocks" in headers[2]
    ranks = [int(r[0].lstrip("=")) for r in rows]
    assert ranks == sorted(ranks) and ranks[0] == 1
    assert rows[0][1] == "mmap/none/dynamic/default" and rows[0][0] == "=1"  # fastest, but tied
    # the baseline's interval [948, 1217] overlaps e.g. mmap/none/fixed/balanced's: a tie, marked
    row = row_of([r[1:] for r in rows], "mmap/none/fixed/balanced")
    assert row[2].endswith("(tie)")
    base = row_of([r[1:] for r in rows], "raw/none/fixed/default")
    assert base[2] == "1.00"
    assert notes[0].startswith("= marks a tie")
    # within a rank, by throughput
    for a, b in zip(rows, rows[1:]):
        if a[0].lstrip("=") == b[0].lstrip("="):
            assert float(a[2].split()[0]) >= float(b[2].split()[0])


def interval_cell(name: str, thr: float, low: float, high: float, label="95% CI, batch means, 10 blocks"):
    return CellResult.from_json({"cell": f"storage={name}", "strategies": {"storage": name}, "figures": {
        "throughput": thr, "throughput_ci": [low, high], "throughput_ci_label": label}})


def test_ranking_ties_by_hand():
    cells = [interval_cell("raw", 100, 95, 105), interval_cell("mmap", 120, 110, 130),
             interval_cell("hdf5", 112, 104, 125), interval_cell("zarr", 200, 190, 210)]
    title, headers, rows, notes = astuple(ranking_table(cells))
    # zarr is above everything; mmap and hdf5 overlap (tie); hdf5 overlaps raw, mmap does not
    assert [(r[0], r[1]) for r in rows] == [("1", "zarr"), ("=2", "mmap"), ("=2", "hdf5"), ("=3", "raw")]
    assert [r[2] for r in rows] == ["200 [190, 210]", "120 [110, 130]", "112 [104, 125]", "100 [95, 105]"]
    assert headers[2] == "samples/s [95% CI, batch means, 10 blocks]" and "slowest" in headers[3]
    assert [r[3] for r in rows] == ["2.00", "1.20", "1.12 (tie)", "1.00"]


def test_differing_interval_labels_get_a_column():
    cells = [interval_cell("raw", 100, 95, 105), interval_cell("mmap", 120, 110, 130, "min-max of 3 repeats, "
                                                                                     "75% coverage")]
    title, headers, rows, notes = astuple(ranking_table(cells))
    assert headers[2] == "samples/s [interval]" and headers[3] == "interval"
    assert rows[0][3] == "min-max of 3 repeats, 75% coverage" and rows[1][3] == "95% CI, batch means, 10 blocks"


def test_markdown_fits_a_pull_request_comment(cells_1x, cells_4x):
    text = "\n".join(render_tables(article_tables(cells_4x, cells_1x), "markdown", level=3))
    assert text.count("### ") == 4
    assert "| storage/cache/batching/sampler" in text and "|---" in text
    assert "capacity_mb" not in text  # short labels in the tables; the report's header lists the parameters
    plain = "\n".join(render_tables(article_tables(cells_4x), "text"))
    assert "Scaling" not in plain and "|" not in plain and "All cells by throughput" in plain


def test_the_report_says_emulated_and_overrun_once(cells_1x, cells_4x):
    for fmt in ("text", "markdown"):
        text = report.render(cells_4x, results_1x=cells_1x, fmt=fmt)
        assert text.count("ACCELERATOR EMULATED") == 1 and text.count("VERDICT: host work outlasted") == 1
        assert "understate" not in text
        assert text.count("Parameters:") == 1 and text.count("The articles' tables, measured") == 1
        assert "Scaling: 1 vs 4 ranks" in text


def cell(storage="raw", cache="none", batching="fixed", sampler="default", thr=100.0, gb=1.0, batch=32.0,
         world=1, error=None, repeat=None, params=None, **extra) -> CellResult:
    """A result as an older harness wrote it: names are derived from the labels and params."""
    strategies = {"storage": storage, "cache": cache, "batching": batching, "sampler": sampler}
    out = {"cell": ",".join(f"{k}={v}" for k, v in strategies.items()), "strategies": strategies,
           "params": params or {}, "world_size": world, "emulated": False, "error": error,
           "figures": {} if error else {"throughput": thr, "device_peak_gb": gb, "mean_batch": batch,
                                        "au_pct": 50.0, "stall_mean_pct": 10.0, "host_pss_total_mb": 500.0}}
    if repeat is not None:
        out["repeat"] = repeat
    return CellResult.from_json({**out, **extra})


def test_hand_made_numbers_exactly():
    one = [cell(thr=100), cell(storage="mmap", thr=50)]
    four = [cell(thr=300, world=4), cell(storage="hdf5", thr=400, world=4)]
    title, headers, rows, notes = astuple(scaling_table(one, four))
    assert "*" not in "".join(headers)  # nothing emulated, nothing marked
    assert rows == [["raw", "100", "300", "75"], ["hdf5", "-", "400", "-"], ["mmap", "50", "-", "-"]]
    assert notes == []  # no interval to show: none claimed

    cells = [cell(thr=100, gb=2.0, batch=32),
             cell(batching="dynamic(max_batch=64)", thr=150, gb=1.5, batch=20, params={"batching": {"max_batch": 64}}),
             cell(cache="lru(capacity_mb=8)", thr=125, params={"cache": {"capacity_mb": 8}}),
             cell(storage="mmap", error="OOM: too big")]
    assert [c.name("batching") for c in cells[:2]] == ["fixed", "dynamic"] and cells[2].name("cache") == "lru"
    title, headers, rows, notes = astuple(fixed_vs_dynamic_table(cells))
    assert headers[0] == "storage/cache" and row_of(rows, "raw/none") == ["raw/none", "2.00", "1.50", "-25",
                                                                         "32.0", "20.0"]
    assert row_of(rows, "raw/lru")[1:3] == ["1.00", "-"]
    assert row_of(rows, "mmap/none")[1] == "OOM"

    title, headers, rows, notes = astuple(ladder_table(cells, dataset_samples=1000))
    assert rows[0] == ["baseline", "raw/none/fixed/default", "100", "10.0", "50", "2.00", "500", "1.00", "-"]
    assert rows[1][1:4] == ["raw/lru/fixed/default", "125", "8.0"] and rows[1][-2:] == ["1.25", "no interval"]
    assert rows[2][0] == "+ dynamic batching" and rows[2][1].startswith("not in this run")
    # no hdf5 in this run: the a-priori order falls to mmap (present, errored); never "best"
    assert rows[3][0] == "+ everything (mmap, balanced sampler)"
    assert rows[3][1] == "not in this run (mmap/lru/dynamic/balanced)"

    title, headers, rows, notes = astuple(ranking_table(cells))
    assert [r[2] for r in rows] == ["150", "125", "100", "OOM"] and rows[-1][0] == "-"
    # no intervals (old lines without per-step records): no rank and no tie (harness.analysis.ties), listed
    # by the point value
    assert [r[0] for r in rows[:3]] == ["-", "-", "-"]
    assert [r[3] for r in rows[:3]] == ["1.50", "1.25", "1.00"] and "vs baseline" in headers[3]
    assert any("has no rank (-) and is tied with none" in n for n in notes)


def test_no_baseline_ranks_against_slowest_and_old_cells_without_fields():
    cells = [cell(storage="mmap", thr=200), cell(storage="hdf5", thr=80)]  # no ranks, coverage, cache fields
    title, headers, rows, notes = astuple(ranking_table(cells))
    assert "slowest" in headers[3] and [r[3] for r in rows] == ["2.50", "1.00"]
    assert ladder_table(cells).rows[0][1].startswith("not in this run")
    del cells[1].strategies["sampler"], cells[1].names["sampler"]  # an axis an older run did not record
    text = "\n".join(render_tables(article_tables(cells), "markdown", level=3))
    assert "ladder" not in text and "### All cells" in text
    assert note_lines(cells) == ["Every cell: cache=none, batching=fixed"]  # not sampler: one lacks it


def test_repeats_are_merged_by_median():
    cells = [cell(thr=t, repeat=i) for i, t in enumerate([100, 130, 90])] + [cell(storage="mmap", thr=50),
                                                                          cell(storage="mmap", error="x")]
    merged = merge_repeats(cells)
    assert len(merged) == 2 and merged[0].figures.throughput == 100 and merged[0].repeats == 3
    assert merged[1].repeats == 1 and merged[1].failed_repeats == 1 and merged[1].figures.throughput == 50
    title, headers, rows, notes = astuple(ranking_table(cells))
    assert headers[-1] == "n" and rows[0][-1] == "3" and rows[1][-1] == "1 of 2 (1 failed)"
    assert rows[0][2] == "100 [90, 130]" and "min-max of 3 repeats, 75% coverage" in headers[2] + rows[0][3]


def test_kernel_au_and_host_launch_time_appear_where_measured():
    """A profiled GPU run's kernel AU beside the event AU, and a real GPU's host launch time; neither column in
    an emulated, unprofiled run (the launch time of an emulated run is the stand-in's, not a GPU host's)."""
    def cell(name, emulated, **figures):
        return CellResult.from_json({"cell": f"storage={name}", "strategies": {"storage": name},
                                     "emulated": emulated, "figures": {"throughput": 100.0, **figures}})

    plain = ranking_table([cell("raw", True, launch_ms_p50=0.4), cell("mmap", True)])
    assert "kernel AU %" not in plain.headers and "host launch ms" not in plain.headers
    gpu = ranking_table([cell("raw", False, au_pct=90.0, kernel_au_pct=71.0, launch_ms_p50=2.345),
                         cell("mmap", False, au_pct=88.0)])
    assert {r[gpu.headers.index("kernel AU %")] for r in gpu.rows} == {"71", "-"}
    assert {r[gpu.headers.index("host launch ms")] for r in gpu.rows} == {"2.35", "-"}
    assert any("kernel AU %" in n for n in gpu.notes)
