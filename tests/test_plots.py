"""PNG figures from the recorded 4xV100 run (tests/fixtures) and from hand-made repeats."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from harness.measure.rankrecord import SHOWN_PARTS  # noqa: E402
from harness.report import plots  # noqa: E402
from harness.report.tables import shown_axes, stack_label  # noqa: E402
from harness.results.cellresult import CellResult  # noqa: E402
from harness.results.repeats import merge_repeats  # noqa: E402

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
    assert [p.name for p in paths] == ["throughput.png", "step_times.png", "time_split.png"]
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
    stack = ax["time_split.png"].patches
    assert len(stack) == 5 * len(cells)  # five parts per cell (zero-width for these older lines)
    assert all(b.get_width() == 0 for b in stack)  # the fixture predates the split: nothing invented
    assert all("(no split recorded)" in t.get_text() for t in ax["time_split.png"].get_yticklabels())
    # whiskers: every fixture cell has per-step records, so a batch-means interval each
    whiskers = [line for line in ax["throughput.png"].collections if len(line.get_segments()) == 1]
    assert len(whiskers) == len(cells)
    assert "95% CI, batch means, 10 blocks" in ax["throughput.png"].get_xlabel()


def split_cell(name: str, parts: tuple[float, ...], ci=None, label=None) -> CellResult:
    keys = [p.figure for p in SHOWN_PARTS]
    figures = {"throughput": 100.0, **dict(zip(keys, parts))}
    if ci:
        figures.update(throughput_ci=ci, throughput_ci_label=label)
    return CellResult.from_json({"cell": f"storage={name}", "strategies": {"storage": name}, "figures": figures})


def test_time_split_is_five_parts_summing_to_100():
    cells = [split_cell("raw", (20.0, 1.0, 60.0, 9.0, 10.0), [90.0, 110.0], "95% CI, batch means, 10 blocks"),
             split_cell("mmap", (5.0, 0.5, 80.0, 4.5, 10.0), [95.0, 120.0], "95% CI, batch means, 8 blocks")]
    shown, labels, ax = drawn(cells)
    stack = ax["time_split.png"].patches
    assert len(stack) == 10
    # bars are drawn part by part: stack[part * n + cell]
    assert [b.get_width() for b in stack[0::2]] == [20.0, 1.0, 60.0, 9.0, 10.0]
    assert stack[2 * 2].get_x() == pytest.approx(21.0)  # AU starts after stall + h2d
    assert sum(b.get_width() for b in stack[1::2]) == pytest.approx(100.0)
    assert [t.get_text() for t in ax["time_split.png"].get_legend().get_texts()] == [p.label for p in SHOWN_PARTS]
    assert [t.get_text() for t in ax["time_split.png"].get_legend().get_texts()] == [
        "stall (waiting for data)", "host-to-device", "device busy (AU)", "waiting for other ranks", "host overhead"]
    assert plots.time_split(cells[0]) == {"stall_mean_pct": 20.0, "h2d_pct": 1.0, "au_pct": 60.0,
                                          "peer_wait_pct": 9.0, "overhead_pct": 10.0}
    xlabel = ax["throughput.png"].get_xlabel()
    assert "95% CI, batch means, 10 blocks" in xlabel and "8 blocks" in xlabel
    (segments,) = ax["throughput.png"].collections[0].get_segments()
    assert [p[0] for p in segments] == [90.0, 110.0]  # the whisker is [low, high], not a symmetric +-


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
    assert len(whiskers) == 4  # every cell has 2+ measured repeats: one interval whisker each
    assert "of the median" in ax["throughput.png"].get_xlabel() or "min-max of" in ax["throughput.png"].get_xlabel()
    texts = [t.get_text() for t in ax["throughput.png"].texts]
    assert "(1 of 3 failed)" in texts[0] and "failed" not in texts[1]




def test_the_effects_picture_reads_at_a_glance():
    """Ratio ticks (x0.95, x1.0, ...: never "9 x 10^-1"), each row's decision beside it, nothing cut off."""
    from harness.analysis.effects import Effect
    from harness.report.effecttables import effects_figure

    shown = [Effect("throughput", "cache", "lru(capacity_mb=64,level=stored,scope=worker)", "none", 1.01, 0.99,
                    1.03, 24),
             Effect("throughput", "batching", "dynamic(max_batch=64)", "fixed", 1.19, 1.17, 1.21, 24),
             Effect("throughput", "sampler", "balanced", "default", 0.98, 0.95, 1.06, 24)]
    fig = effects_figure(shown)
    ax = fig.axes[0]
    ticks = [t.get_text() for t in ax.get_xticklabels()]
    assert ticks and all(t.startswith("x") for t in ticks) and "x1.0" in ticks, ticks
    assert [t.get_text() for t in ax.texts] == ["no effect larger than 5%", "higher", "open"]
    fig.canvas.draw()
    renderer, box = fig.canvas.get_renderer(), fig.bbox
    texts = [ax.xaxis.label, ax.title, *ax.get_yticklabels(), *ax.get_xticklabels(), *ax.texts]
    for t in texts:
        b = t.get_window_extent(renderer)
        assert box.x0 <= b.x0 and b.x1 <= box.x1 + 1 and box.y0 <= b.y0 and b.y1 <= box.y1 + 1, t.get_text()


def test_the_effects_picture_shows_the_stopping_rules_decisions_not_one_looks():
    """plots/effects.png writes beside each level what EFFECTS on the first screen decides (the stopping
    rule's word, response and pass), with the interval of its deciding look, on a real run's visits."""
    from harness.analysis import sequential
    from harness.report.effecttables import effects_figure
    from harness.report.report import decision_words, plotted_decisions
    from harness.results import rundir

    results = rundir.read_results(Path(__file__).parent / "fixtures" / "run-smoke-2passes")
    decided = sequential.decide(results, None)  # one look, at pass 2: open, with its repeated interval
    name, pairs = plotted_decisions(decided)
    words = decision_words(decided)
    fig = effects_figure([], decided=(name, pairs))
    ax = fig.axes[0]
    shown = [t.get_text() for t in ax.texts]
    assert shown == [words[(d.effect.axis, d.effect.level)] for d in decided.levels
                     if d.effect.low > 0 and d.effect.high < float("inf")]
    assert shown and all(f" on {name}" in w for w in shown) and name in ax.get_xlabel()
    assert "deciding look" in ax.get_xlabel() and len(shown) == 2
    assert all(not w.startswith(("higher", "lower", "no effect")) for w in shown)  # one look's 95% is not it
