"""harness.report.report and harness.report.tables: intervals shown as [low, high] with their labels, the five-part
split, balance and feeding figures, the overrun verdict, failed repeats, on real fixture lines and synthetic
ones."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from harness.report import header, report, tables
from harness.results.cellresult import CellResult
from harness.results.environment import Environment
from harness.results.repeats import merge_repeats

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="module")
def cells_4x():
    lines = (FIXTURES / "cells_4xV100.jsonl").read_text().splitlines()
    return [CellResult.from_json(json.loads(line)) for line in lines if line.strip()]


def new_cell(storage="raw", thr=1000.0, repeat=0, overrun=0.0, error=None, **figures) -> CellResult:
    """A line as the five-part harness writes it (synthetic figures)."""
    f = {"throughput": thr, "throughput_ci": [thr * 0.9, thr * 1.05],
         "throughput_ci_label": "95% CI, batch means, 10 blocks", "stall_mean_pct": 10.0, "stall_max_pct": 14.0,
         "h2d_pct": 2.0, "au_pct": 70.0, "peer_wait_pct": 8.0, "overhead_pct": 10.0, "step_imbalance": 1.3,
         "window_imbalance": 1.02, "cost_imbalance": 1.1, "loader_cpu_s_per_sample": 0.005,
         "device_samples_per_s": 300.0, "cores_to_feed": 1.5, "overrun_pct": overrun, "step_p50_ms": 10.0,
         **figures}
    return CellResult.from_json({"schema": 2, "cell": f"storage={storage}", "strategies": {"storage": storage},
                                 "device": "V100-16GB (emulated)", "emulated": True, "world_size": 4,
                                 "repeat": repeat, "error": error, "figures": {} if error else f})


def test_no_symmetric_plus_minus_anywhere(cells_4x):
    many = []
    for repeat, factor in enumerate([0.9, 1.0, 1.2]):
        for c in cells_4x[:3]:
            c = copy.deepcopy(c)
            c.repeat = repeat
            c.figures.throughput *= factor
            many.append(c)
    for results in (cells_4x, many):
        for fmt in ("text", "markdown"):
            text = report.render(results, fmt=fmt)
            assert "±" not in text and "+-" not in text


def test_single_run_intervals_are_batch_means_from_the_recorded_steps(cells_4x):
    t = report.throughput_table(merge_repeats(cells_4x))
    assert t.headers[4] == "samples/s* [95% CI, batch means, 10 blocks (from the recorded steps)]"
    value, low, high = t.rows[0][4].replace("[", "").replace("]", "").replace(",", "").split()
    assert value == "1082" and float(low) < 1082 < float(high)
    # centred on the throughput shown: the slowest rank's steps sum to its window
    assert float(high) - 1082 == pytest.approx(1082 - float(low), abs=1.5)


def test_repeats_give_the_order_statistic_interval_with_its_real_coverage():
    results = [new_cell(thr=t, repeat=i) for i, t in enumerate([100.0, 130.0, 90.0])]
    (summary,) = merge_repeats(results)
    iv = tables.interval(summary)
    assert (iv.low, iv.high) == (90.0, 130.0) and iv.label == "min-max of 3 repeats, 75% coverage"
    t = report.throughput_table([summary])
    assert t.headers[1] == "samples/s* [min-max of 3 repeats, 75% coverage]" and t.rows[0][1] == "100 [90, 130]"
    assert t.headers[-1] == "repeats" and t.rows[0][-1] == "3"


def test_failed_repeats_are_shown_per_cell():
    results = [new_cell(thr=100.0, repeat=0), new_cell(thr=110.0, repeat=1),
               new_cell(repeat=2, error="RuntimeError: worker died"), new_cell("mmap", thr=50.0)]
    cells = merge_repeats(results)
    t = report.throughput_table(cells)
    assert [r[-1] for r in t.rows] == ["2 of 3 (1 failed)", "1"]
    assert any("measured of run" in n for n in t.notes)
    text = report.render(results)
    assert "WARNING: repeats failed in 1 cell(s)" in text


def test_five_parts_and_balance_columns():
    cells = merge_repeats([new_cell(), new_cell("mmap", thr=1200.0)])
    u = report.utilisation_table(cells)
    assert u.headers == ["storage", "stall % mean/max", "h2d %", "AU %* (device busy / wall)", "peer wait %*",
                         "overhead %*", "overrun %*"]
    assert u.rows[0] == ["raw", "10 / 14", "2", "70", "8", "10", "0"]
    assert "compute" not in " ".join(u.headers) and "CPU>model" not in " ".join(u.headers)
    b = report.balance_table(cells, what_if_cores=1.0)
    assert b.headers[1:] == ["step imbalance", "window imbalance", "cost imbalance", "loader CPU ms/sample",
                             "rank CPU ms/sample", "device samples/s/rank*", "cores to feed/rank*",
                             "predicted samples/s at 1 cores/rank* (modelled)"]
    # 4 ranks x min(300, 1 / 0.005 = 200) = 800 (no rank CPU recorded in this line)
    assert b.rows[0][1:] == ["1.30", "1.02", "1.10", "5.00", "-", "300", "1.50", "800"]
    assert report.balance_table(cells).headers[-1] == "cores to feed/rank*"  # no what-if: no column


def test_old_lines_keep_their_window_imbalance_and_say_their_au_is_old(cells_4x):
    cells = merge_repeats(cells_4x[:2])
    b = report.balance_table(cells)
    assert b.rows[0][1:4] == ["-", "1.05", "-"]  # imbalance (window) of a schema-1 line
    u = report.utilisation_table(cells)
    assert u.rows[0][3] == "79 (old)" and any(n.startswith("(old)") for n in u.notes)


def test_overrun_verdict_with_figures_replaces_the_old_warning():
    cells = merge_repeats([new_cell(overrun=40.0, cores_to_feed=3.0), new_cell("mmap", overrun=2.0,
                                                                                cores_to_feed=1.0)])
    lines = header.overrun_lines(cells, Environment(cpu_count=2))
    assert lines == ["VERDICT: host work outlasted the modelled V100-16GB step in up to 40% of steps (median "
                     "21% over 2 cells; 1 cell(s) above 5%); that time is counted as host overhead, not device "
                     "time; feeding the device needs 2.0 cores per rank* (median over cells) and this run has 2 cores "
                     "for 4 ranks"]
    assert header.overrun_lines(merge_repeats([new_cell(overrun=5.0)]), Environment()) == []  # at most 5%: no verdict
    text = report.render(cells, env=Environment(cpu_count=2))
    assert text.count("VERDICT") == 1 and "understate" not in text


def test_cell_without_interval_shows_the_value_alone():
    old = CellResult.from_json({"cell": "storage=raw", "strategies": {"storage": "raw"},
                                "figures": {"throughput": 99.6}})
    assert tables.interval(old) is None and tables.fmt_throughput(old) == "100"
    assert tables.interval_header([old]) == ("", False)
    # a recorded window of 3 steps is too short for batch means
    short = CellResult.from_json({"cell": "c", "figures": {"throughput": 10.0}, "ranks": [
        {"step": [0.1, 0.1, 0.1], "batch_sizes": [1, 1, 1]}]})
    assert tables.interval(short) is None


def test_markdown_notes_follow_their_table():
    lines = tables.render_tables([tables.Table("T", ["a"], [["1"]], ["a note"])], "markdown")
    assert lines[-2:] == ["", "a note  "]
    assert tables.render_tables([tables.Table("T", ["a"], [["1"]], ["a note"])], "text")[-1] == "a note"


def test_a_cold_cell_reading_far_more_than_it_delivered_is_warned_and_the_device_named():
    def cold(storage, amp, advice):
        c = new_cell(storage, disk_read_mb=10.8 * amp, logical_read_mb=10.8, read_amplification=amp)
        c.page_cache = type(c).NESTED["page_cache"].from_json({"state": "cold"})
        c.advice = advice
        return c

    env = Environment(data_dir="/data", data_device="vda", read_ahead_kb=8192)
    cells = merge_repeats([cold("mmap(advice=normal)", 1041.0, "normal"), cold("mmap", 1.7, "random")])
    lines = header.io_lines(cells, env)
    assert lines[0].startswith("Data: /data on block device vda, read_ahead_kb 8192")
    assert len(lines) == 2 and "1 cold cell(s) read more than 4x" in lines[1] and "1041x" in lines[1]
    assert "advice normal" in lines[1]
    assert header.io_lines(cells[1:], Environment()) == []  # 1.7x: no warning; no device recorded: no line
    table = report.memory_io_table(cells)
    assert "read amp x" in table.headers and "advice" in table.headers
    assert table.rows[0][-3:] == ["1041.0", "10.8", "normal"] and table.rows[1][-1] == "random"
