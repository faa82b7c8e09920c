"""PNG figures from cells.jsonl: throughput per cell, step-time distributions, and where each
rank's time goes (the five parts of its wall time).

Drawn on matplotlib's Agg canvas directly (no pyplot, no GUI backend, the global backend is left
alone). Takes results (harness.results.cellresult.CellResult). Errored cells are left out. Repeats
of a cell (several lines with its id) are merged (harness.results.repeats.merge_repeats): the bar
is the median. The whiskers are the cell's throughput interval (harness.report.tables.interval:
batch means within one run, the order-statistic interval of the median across repeats), and the
axis label says what they are.
"""
from __future__ import annotations

import io
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from harness import safewrite
from harness.measure.rankrecord import SHOWN_PARTS
from harness.report.tables import EMULATED_MARK, emulated, interval, shown_axes, stack_label
from harness.results.cellresult import CellResult
from harness.results.repeats import CellSummary, merge_repeats


def new_figure(rows: int, width: float = 9.0) -> Figure:
    """A figure on an Agg canvas, tall enough for one readable row per cell."""
    fig = Figure(figsize=(width, 1.6 + 0.3 * max(rows, 3)), dpi=110)
    FigureCanvasAgg(fig)
    return fig


def _whiskers(cell: CellSummary) -> tuple[float, float, str] | None:
    """(low, high, what) of the cell's throughput interval; None when it has none."""
    iv = interval(cell)
    return (iv.low, iv.high, iv.label) if iv else None


def _setup(fig: Figure, labels: list[str], axes: list[str], title: str, xlabel: str, cells: list[CellSummary]):
    ax = fig.add_subplot()
    ax.set_yticks(range(len(labels)), labels, fontsize=8)
    ax.set_ylim(len(labels) - 0.5, -0.5)  # first cell on top
    ax.set_ylabel("/".join(axes), fontsize=9)
    ax.set_xlabel(xlabel)
    suffix = f"\n({EMULATED_MARK} emulated accelerator: modelled step time)" if emulated(cells) else ""  # fits
    ax.set_title(title + suffix, fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    ax.set_axisbelow(True)
    return ax


def save_png(fig: Figure, path: Path) -> Path:
    """The figure as `path`, a PNG in the run directory's plots/ (harness.safewrite: never through
    a symbolic link, plots/ included)."""
    data = io.BytesIO()
    fig.savefig(data, format="png")
    return safewrite.write_bytes(path, data.getvalue(), root=Path(path).parent.parent)


def _save(fig: Figure, path: Path) -> Path:
    fig.tight_layout()
    return save_png(fig, path)


def throughput_plot(cells: list[CellSummary], labels: list[str], axes: list[str]) -> Figure:
    """One bar per cell (the median over repeats, or the run's figure), whiskers for its
    interval."""
    fig = new_figure(len(cells))
    m = EMULATED_MARK if emulated(cells) else ""
    ax = _setup(fig, labels, axes, "Throughput per cell", f"samples/s{m} (all ranks)", cells)
    medians = [c.figures.throughput for c in cells]
    ax.barh(range(len(cells)), medians, color="#1f77b4", height=0.7)
    what: list[str] = []
    top = 0.0
    for i, c in enumerate(cells):
        whisker = _whiskers(c)
        end = medians[i]
        if whisker:
            low, high, label = whisker
            ax.errorbar(medians[i], i, xerr=[[max(0.0, medians[i] - low)], [max(0.0, high - medians[i])]],
                        fmt="none", ecolor="black", capsize=3, lw=1)
            if label not in what:
                what.append(label)
            end = max(end, high)
        failed = getattr(c, "failed_repeats", 0)
        ax.text(end, i, f" {medians[i]:.0f}" + (f" ({failed} of {c.total_repeats} failed)" if failed else ""),
                va="center", fontsize=7)
        top = max(top, end)
    ax.set_xlim(0, top * 1.2 or 1)
    if what:
        shown = "; ".join(what[:2]) + (f"; and {len(what) - 2} more" if len(what) > 2 else "")
        ax.set_xlabel(ax.get_xlabel() + f"\nwhiskers: {shown}", fontsize=8)
    return fig


def step_time_plot(cells: list[CellSummary], labels: list[str], axes: list[str]) -> Figure:
    """One box per cell over all ranks' measured step times (repeats pooled)."""
    fig = new_figure(len(cells))
    m = EMULATED_MARK if emulated(cells) else ""
    ax = _setup(fig, labels, axes, "Step time over all ranks' measured steps", f"step time ms{m}", cells)
    data = [np.concatenate([np.asarray(r.step, dtype=float) for r in c.ranks]
                           or [np.zeros(0)]) * 1e3 for c in cells]
    ax.boxplot(data, positions=range(len(cells)), orientation="horizontal", widths=0.6, showfliers=True,
               flierprops={"markersize": 2, "alpha": 0.5}, medianprops={"color": "#d62728"})
    ax.set_yticks(range(len(labels)), labels, fontsize=8)
    ax.set_ylim(len(labels) - 0.5, -0.5)
    return fig


def time_split(cell: CellResult) -> dict[str, float] | None:
    """The five parts of a rank's wall time (% of the window, mean over ranks; their figures by
    name, in harness.measure.rankrecord.SHOWN_PARTS order), or None for a line written before the
    split existed."""
    values = {part.figure: getattr(cell.figures, part.figure) for part in SHOWN_PARTS}
    if any(v is None for v in values.values()):
        return None
    return {k: float(v) for k, v in values.items()}


def time_split_plot(cells: list[CellSummary], labels: list[str], axes: list[str]) -> Figure:
    """One stacked bar per cell: stall, h2d, device busy (AU), peer wait and host overhead, % of
    wall time. A cell from an older line without the split is drawn without a bar and labelled
    so."""
    fig = new_figure(len(cells))
    m = EMULATED_MARK if emulated(cells) else ""
    splits = [time_split(c) for c in cells]
    shown = [label if s is not None else f"{label} (no split recorded)" for label, s in zip(labels, splits)]
    ax = _setup(fig, shown, axes, "Where each rank's time goes (% of wall time, mean over ranks)",
                f"% of wall time{m} (the five parts sum to 100)", cells)
    left = np.zeros(len(cells))
    for part in SHOWN_PARTS:
        widths = np.array([s[part.figure] if s else 0.0 for s in splits])
        ax.barh(range(len(cells)), widths, left=left, height=0.7, color=part.colour, label=part.label)
        left += widths
    ax.set_xlim(0, max(100.0, float(left.max()) if len(left) else 100.0))
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.6 / fig.get_figheight()), ncol=3,
              frameon=False)
    return fig


PLOTS = (("throughput.png", throughput_plot), ("step_times.png", step_time_plot),
         ("time_split.png", time_split_plot))


def write_plots(results: list[CellResult], out_dir: Path) -> list[Path]:
    """Write the PNG figures of the measured cells into out_dir; return their paths (none without
    cells)."""
    shown = [c for c in merge_repeats(results) if c.measured]
    if not shown:
        return []
    out_dir = safewrite.make_dir(out_dir)
    axes = shown_axes(shown)
    labels = [stack_label(shown, c, axes) for c in shown]
    return [_save(plot(shown, labels, axes), out_dir / name) for name, plot in PLOTS]
