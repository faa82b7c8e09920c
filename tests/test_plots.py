"""PNG figures from the recorded 4xV100 run (tests/fixtures) and from hand-made repeats."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from harness import plots  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def cells_4x():
    lines = (FIXTURES / "cells_4xV100.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def assert_pngs(paths: list[Path]):
    assert [p.name for p in paths] == ["throughput.png", "step_times.png", "stall_breakdown.png"]
    for p in paths:
        data = p.read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 10_000
        assert b"Matplotlib" in data[:400]  # the Software text chunk matplotlib writes


def test_three_pngs_from_the_recorded_run(cells_4x, tmp_path):
    assert_pngs(plots.write_plots(cells_4x, tmp_path / "plots"))


def test_figures_are_drawn_on_agg():
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    assert isinstance(plots.new_figure(24).canvas, FigureCanvasAgg)


def test_repeats_and_errored_cells(cells_4x, tmp_path):
    cells = []
    for repeat, factor in enumerate([0.9, 1.0, 1.1]):
        for c in cells_4x[:4]:
            c = copy.deepcopy(c)
            c["repeat"] = repeat
            c["figures"]["throughput"] *= factor
            cells.append(c)
    cells[0].update(error="OOM: a batch did not fit", figures={}, ranks=[])
    broken = copy.deepcopy(cells_4x[5])
    broken["cell"] += ",broken"
    broken.update(error="RuntimeError: worker died", figures={})
    assert_pngs(plots.write_plots(cells + [broken], tmp_path))
    assert plots.write_plots([broken], tmp_path / "none") == []


def test_stall_means_split_sync_out_of_compute():
    rank = {"wait": [0.1, 0.1], "h2d": [0.0, 0.02], "compute": [0.2, 0.2], "sync": [0.05, 0.05],
            "step": [0.3, 0.32]}
    means = plots.stall_means({"ranks": [rank, rank]})
    assert means == pytest.approx({"wait": 100.0, "h2d": 10.0, "compute": 150.0, "sync": 50.0})
    old = {k: v for k, v in rank.items() if k != "sync"}  # older runs recorded no sync
    assert plots.stall_means({"ranks": [old]}) == pytest.approx({"wait": 100.0, "h2d": 10.0, "compute": 200.0})
