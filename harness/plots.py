"""PNG figures from cells.jsonl: throughput per cell, step-time distributions, stall breakdown per step.

Drawn on matplotlib's Agg canvas directly (no pyplot, no GUI backend, the global backend is left alone).
Takes results (harness.records.CellResult). Errored cells are left out. Repeats of a cell (several lines with
its id) are merged (harness.records.merge_repeats): the bar is the median, the whiskers the confidence
interval of the median (harness.stats).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from harness import stats
from harness.records import CellResult, CellSummary, merge_repeats
from harness.tables import EMULATED_MARK, emulated, shown_axes, stack_label

PARTS = (("wait", "wait (data stall)", "#d62728"), ("h2d", "host-to-device", "#ff7f0e"),
         ("compute", "compute", "#1f77b4"), ("sync", "sync (waiting for other ranks)", "#9edae5"))


def new_figure(rows: int, width: float = 9.0) -> Figure:
    """A figure on an Agg canvas, tall enough for one readable row per cell."""
    fig = Figure(figsize=(width, 1.6 + 0.3 * max(rows, 3)), dpi=110)
    FigureCanvasAgg(fig)
    return fig


def _whiskers(cell: CellSummary) -> tuple[float, float, str] | None:
    """(low, high, what) around the median from the cell's merged repeats; None for one repeat."""
    summary = cell.throughput_summary
    if not summary:
        return None
    coverage = stats.median_ci_ranks(summary["n"])[2] * 100  # below n=6 the "95%" CI is the full range
    return summary["lo"], summary["hi"], f"CI of the median ({min(coverage, 95):.0f}% at n={summary['n']})"


def _setup(fig: Figure, labels: list[str], axes: list[str], title: str, xlabel: str, cells: list[CellSummary]):
    ax = fig.add_subplot()
    ax.set_yticks(range(len(labels)), labels, fontsize=8)
    ax.set_ylim(len(labels) - 0.5, -0.5)  # first cell on top
    ax.set_ylabel("/".join(axes), fontsize=9)
    ax.set_xlabel(xlabel)
    suffix = f"  ({EMULATED_MARK} emulated accelerator: modelled step time)" if emulated(cells) else ""
    ax.set_title(title + suffix, fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    ax.set_axisbelow(True)
    return ax


def _save(fig: Figure, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, format="png")
    return path


def throughput_plot(cells: list[CellSummary], labels: list[str], axes: list[str]) -> Figure:
    """One bar per cell (the median), whiskers for the confidence interval of the median over repeats."""
    fig = new_figure(len(cells))
    m = EMULATED_MARK if emulated(cells) else ""
    ax = _setup(fig, labels, axes, "Throughput per cell", f"samples/s{m} (all ranks)", cells)
    medians = [c.figures.throughput for c in cells]
    ax.barh(range(len(cells)), medians, color="#1f77b4", height=0.7)
    notes: dict[int, str] = {}
    for i, c in enumerate(cells):
        whisker = _whiskers(c)
        end = medians[i]
        if whisker:
            low, high, what = whisker
            ax.errorbar(medians[i], i, xerr=[[max(0.0, medians[i] - low)], [max(0.0, high - medians[i])]],
                        fmt="none", ecolor="black", capsize=3, lw=1)
            notes.setdefault(len(c.throughput_repeats), what)
            end = max(end, high)
        ax.text(end, i, f" {medians[i]:.0f}", va="center", fontsize=7)
    repeats = max((c.repeats for c in cells), default=1)
    top = max(max(c.throughput_repeats or [0]) for c in cells)
    ax.set_xlim(0, max(top, *medians) * 1.15 or 1)
    if notes:  # the fewest repeats give the weakest interval: name that one
        fewest = min(notes)
        ax.set_xlabel(ax.get_xlabel() + f"\nbar = median of {fewest}-{repeats} repeats; whiskers = {notes[fewest]}")
    return fig


def step_time_plot(cells: list[CellSummary], labels: list[str], axes: list[str]) -> Figure:
    """One box per cell over all ranks' measured step times (repeats pooled)."""
    fig = new_figure(len(cells))
    m = EMULATED_MARK if emulated(cells) else ""
    ax = _setup(fig, labels, axes, "Step time over all ranks' measured steps", f"step time ms{m}", cells)
    data = [np.concatenate([np.asarray(r.get("step") or [], dtype=float) for r in c.ranks]
                           or [np.zeros(0)]) * 1e3 for c in cells]
    ax.boxplot(data, positions=range(len(cells)), orientation="horizontal", widths=0.6, showfliers=True,
               flierprops={"markersize": 2, "alpha": 0.5}, medianprops={"color": "#d62728"})
    ax.set_yticks(range(len(labels)), labels, fontsize=8)
    ax.set_ylim(len(labels) - 0.5, -0.5)
    return fig


def stall_means(cell: CellResult) -> dict[str, float]:
    """Mean per step (ms, over all ranks' measured steps) of wait, h2d, compute without sync, and sync."""
    ranks = cell.ranks
    steps = sum(len(r.get("step") or r.get("wait") or []) for r in ranks)
    total = {key: sum(float(np.sum(r[key])) for r in ranks if r.get(key)) for key, _, _ in PARTS}
    has_sync = any(r.get("sync") for r in ranks)
    if has_sync:  # the recorded compute includes sync: split it out so the stack sums to the step
        total["compute"] -= total["sync"]
    means = {key: value / steps * 1e3 if steps else 0.0 for key, value in total.items()}
    if not has_sync:
        means.pop("sync")
    return means


def stall_plot(cells: list[CellSummary], labels: list[str], axes: list[str]) -> Figure:
    """One stacked bar per cell: wait, h2d, compute and sync, mean ms per step."""
    fig = new_figure(len(cells))
    m = EMULATED_MARK if emulated(cells) else ""
    ax = _setup(fig, labels, axes, "Where a step's time goes (mean per step, all ranks)", f"ms per step{m}",
                cells)
    means = [stall_means(c) for c in cells]
    left = np.zeros(len(cells))
    for key, name, colour in PARTS:
        if not any(key in mm for mm in means):
            continue
        widths = np.array([mm.get(key, 0.0) for mm in means])
        ax.barh(range(len(cells)), widths, left=left, height=0.7, color=colour, label=name)
        left += widths
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.6 / fig.get_figheight()), ncol=4,
              frameon=False)
    return fig


PLOTS = (("throughput.png", throughput_plot), ("step_times.png", step_time_plot),
         ("stall_breakdown.png", stall_plot))


def write_plots(results: list[CellResult], out_dir: Path) -> list[Path]:
    """Write the PNG figures of the measured cells into out_dir; return their paths (none without cells)."""
    shown = [c for c in merge_repeats(results) if c.measured]
    if not shown:
        return []
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    axes = shown_axes(shown)
    labels = [stack_label(shown, c, axes) for c in shown]
    return [_save(plot(shown, labels, axes), out_dir / name) for name, plot in PLOTS]
