"""PNG figures from the recorded 4xV100 run (tests/fixtures) and from hand-made repeats."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from harness import plots  # noqa: E402
from harness.records import CellResult, merge_repeats  # noqa: E402
from harness.tables import shown_axes, stack_label  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def cells_4x():
    lines = (FIXTURES / "cells_4xV100.jsonl").read_text().splitlines()
    return [CellResult.from_json(json.loads(line)) for line in lines if line.strip()]


def png_size(data: bytes) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk (the first chunk, right after the signature)."""
    assert data.startswith(PNG_MAGIC) and data[12:16] == b"IHDR"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def assert_pngs(paths: list[Path], rows: int):
    """Three valid PNGs on disk, each tall enough for `rows` cells (the figure grows with the cells)."""
    assert [p.name for p in paths] == ["throughput.png", "step_times.png", "stall_breakdown.png"]
    for p in paths:
        assert p.is_file()
        data = p.read_bytes()
        width, height = png_size(data)
        assert len(data) > 10_000 and data.endswith(b"IEND\xaeB`\x82")  # complete, not truncated
        assert b"Matplotlib" in data[:400]  # the Software text chunk matplotlib writes
        assert width == round(9.0 * 110) and height == round((1.6 + 0.3 * max(rows, 3)) * 110)


def test_three_pngs_from_the_recorded_run(cells_4x, tmp_path):
    assert_pngs(plots.write_plots(cells_4x, tmp_path / "plots"), rows=24)


def drawn(cells: list[CellResult]):
    shown = [c for c in merge_repeats(cells) if c.measured]
    axes = shown_axes(shown)
    labels = [stack_label(shown, c, axes) for c in shown]
    return shown, labels, {name: plot(shown, labels, axes).axes[0] for name, plot in plots.PLOTS}


def test_a_known_record_set_draws_one_mark_per_cell(cells_4x):
    cells = cells_4x[:5]
    shown, labels, ax = drawn(cells)
    bars = ax["throughput.png"].patches
    assert [round(b.get_width(), 6) for b in bars] == [round(c.figures.throughput, 6) for c in cells]
    assert [t.get_text() for t in ax["throughput.png"].get_yticklabels()] == labels
    assert labels[0] == "none/fixed/default"
    assert len(ax["step_times.png"].lines) >= 5 * len(cells)  # a box per cell: whiskers, caps, median
    stack = ax["stall_breakdown.png"].patches
    assert len(stack) == 4 * len(cells)  # wait, h2d, compute, sync per cell
    means = plots.stall_means(cells[0])
    assert stack[0].get_width() == pytest.approx(means["wait"])
    assert sum(b.get_width() for b in stack[::len(cells)]) == pytest.approx(sum(means.values()))


def test_repeats_and_errored_cells(cells_4x, tmp_path):
    cells = []
    for repeat, factor in enumerate([0.9, 1.0, 1.1]):
        for c in cells_4x[:4]:
            c = copy.deepcopy(c)
            c.repeat = repeat
            c.figures.throughput *= factor
            cells.append(c)
    cells[0] = CellResult.from_json(dict(cells[0].to_json(), error="OOM: a batch did not fit", figures={},
                                         ranks=[]))
    broken = CellResult.from_json(dict(cells_4x[5].to_json(), cell=cells_4x[5].cell + ",broken",
                                       error="RuntimeError: worker died", figures={}))
    assert_pngs(plots.write_plots(cells + [broken], tmp_path), rows=4)
    assert plots.write_plots([broken], tmp_path / "none") == []
    shown, _, ax = drawn(cells + [broken])
    assert [c.repeats for c in shown] == [2, 3, 3, 3] and shown[0].failed_repeats == 1
    assert len(ax["throughput.png"].patches) == 4  # the broken cell is left out
    whiskers = [line for line in ax["throughput.png"].collections if len(line.get_segments()) == 1]
    assert len(whiskers) == 4  # every cell has 2+ measured repeats: one CI whisker each


def test_stall_means_split_sync_out_of_compute():
    rank = {"wait": [0.1, 0.1], "h2d": [0.0, 0.02], "compute": [0.2, 0.2], "sync": [0.05, 0.05],
            "step": [0.3, 0.32]}
    means = plots.stall_means(CellResult("c", ranks=[rank, rank]))
    assert means == pytest.approx({"wait": 100.0, "h2d": 10.0, "compute": 150.0, "sync": 50.0})
    old = {k: v for k, v in rank.items() if k != "sync"}  # older runs recorded no sync
    assert plots.stall_means(CellResult("c", ranks=[old])) == pytest.approx({"wait": 100.0, "h2d": 10.0,
                                                                            "compute": 200.0})
