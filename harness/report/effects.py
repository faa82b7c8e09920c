"""The effect of each choice, from every cell and visit of the run (harness.analysis.effects): the fits per
figure, effects.jsonl, the table and the plot.

Figures fitted: throughput (samples/s), AU (device busy / wall), device peak memory and host PSS. A visit's
pass (its repeat) is a term of the fit, so drift between passes does not bias an axis. Effects are ratios
against the axis's first level in the matrix; `low` and `high` bound a 95% interval.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from harness.analysis.effects import (
    EFFECTS,
    MIN_EFFECT,
    NO_EFFECT,
    Effect,
    fit_effects,
    level_order,
    observations,
)
from harness.report.tables import Table
from harness.results import fileformat
from harness.results.cellresult import CellResult

# effects.jsonl's `figure` -> (the Figures attribute, the label in tables)
FIGURES = {"throughput": ("throughput", "samples/s"), "au": ("au_pct", "AU %"),
           "device_memory": ("device_peak_gb", "device peak GB"), "host_memory": ("host_pss_peak_mb", "host PSS MB")}


def run_effects(results: list[CellResult], cell_ids: list[str] | None = None) -> list[Effect]:
    """Every figure's effects over the run's measured visits ([] with fewer visits than terms)."""
    order = level_order(results, cell_ids)
    out = []
    for figure, (attribute, _) in FIGURES.items():
        out += fit_effects(observations(results, attribute), order, figure)
    return out


def write_effects(run_dir: Path, effects: list[Effect]) -> Path:
    """effects.jsonl, one Effect a line, of the current version (harness.analysis.effects.EFFECTS), replaced
    atomically."""
    path = Path(run_dir) / "effects.jsonl"
    fileformat.write_lines(path, [e.to_json() for e in effects], EFFECTS)
    return path


def read_effects(run_dir: Path) -> list[Effect]:
    """A run directory's effects.jsonl, older versions upgraded on read ([] when there is none); a damaged or
    newer line is a harness.results.fileformat.ResultsError."""
    return fileformat.read_lines(Path(run_dir) / "effects.jsonl", EFFECTS, Effect.from_json)


def _ratio(e: Effect) -> str:
    return f"x{e.ratio:.2f} [{e.low:.2f}, {e.high:.2f}]"


def verdict_word(e: Effect, min_effect: float = MIN_EFFECT) -> str:
    """The level's decision in words (harness.analysis.effects.Effect.decision)."""
    word = e.decision(min_effect)
    return f"no effect larger than {min_effect:.0%}" if word == NO_EFFECT else word


def effects_table(effects: list[Effect], emulated: bool, min_effect: float = MIN_EFFECT,
                  matrix_order: dict[str, list[str]] | None = None) -> Table:
    """One row per axis level: its effect on each figure, ratio [95% interval] against the reference, and its
    decision. `matrix_order`: each axis's levels as the matrix lists them, to name a level no visit measured."""
    mark = "*" if emulated else ""
    figures = [f for f in FIGURES if any(e.figure == f for e in effects)]
    rows, seen = [], []
    for e in effects:
        if e.kind == "main" and (e.axis, e.level) not in seen:
            seen.append((e.axis, e.level))
    by = {(e.figure, e.axis, e.level): e for e in effects if e.kind == "main"}
    for axis, level in seen:
        ref = by[(figures[0], axis, level)].reference if (figures[0], axis, level) in by else ""
        row = [axis, level, "reference" if level == ref else f"vs {ref}"]
        for f in figures:
            e = by.get((f, axis, level))
            row.append("-" if e is None else ("1" if level == e.reference else
                                              f"{_ratio(e)} {verdict_word(e, min_effect)}"))
        rows.append(row)
    headers = ["axis", "level", "against"] + [
        FIGURES[f][1] + (mark if f in ("throughput", "au", "device_memory") else "") for f in figures]
    notes = ["ratio of the figure against the axis's first level, averaged over the other axes, with a 95% "
             "interval from every cell and visit (least squares on the log figure, a term per level and per "
             f"pass); higher / lower: the interval excludes 1; no effect larger than {min_effect:.0%}: it lies "
             f"inside [1/{1 + min_effect:g}, {1 + min_effect:g}] (--min-effect); open: neither; identical in every "
             "cell: the figure did not vary, nothing to decide"]
    fitted_levels = {(e.axis, e.level) for e in effects}
    for axis, levels in (matrix_order or {}).items():
        lost = [lv for lv in levels if (axis, lv) not in fitted_levels]
        ref = next((e.reference for e in effects if e.axis == axis), None)
        if lost and ref is not None:
            notes.append(f"{axis}: {', '.join(lost)} had no measured visit; the other levels are against {ref}")
    notes += [f"interaction {e.axis} = {e.level}: {_ratio(e)} ({e.figure}), the factor by which the cell of "
              "both levels differs from what the two main effects measured against the reference levels give "
              "(not a factor on the averaged effects above)"
              for e in effects if e.kind == "interaction" and e.decided]
    return Table("Effect of each choice", headers, rows, notes)


def effects_plot(effects: list[Effect], path: Path, figure: str = "throughput") -> Path | None:
    """A forest plot of one figure's effects: a point and a 95% bar per level, log scale, 1 marked."""
    shown = [e for e in effects if e.figure == figure and e.kind == "main" and e.level != e.reference]
    if not shown:
        return None
    fig = Figure(figsize=(8.0, 1.4 + 0.35 * len(shown)), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    y = np.arange(len(shown))[::-1]
    ratio = np.array([e.ratio for e in shown])
    err = np.array([[e.ratio - e.low for e in shown], [e.high - e.ratio for e in shown]])
    ax.errorbar(ratio, y, xerr=err, fmt="o", color="#1f77b4", capsize=3)
    ax.axvline(1.0, color="#7f7f7f", linestyle="--", linewidth=1)
    ax.set_xscale("log")
    ax.set_yticks(y, [f"{e.axis}={e.level} vs {e.reference}" for e in shown])
    ax.set_xlabel(f"{FIGURES[figure][1]}: ratio against the axis's first level (95% interval)")
    ax.set_title("Effect of each choice")
    fig.tight_layout()
    fig.savefig(path)
    return path
