"""The effect of each choice, from every cell and visit of the run (harness.analysis.effects): the
fits per figure, effects.jsonl, the table and the plot.

Figures fitted: throughput (samples/s), the host rate (cores / CPU s per sample; both with the
visit's outside load as a covariate), AU (device busy / wall), device peak memory and host PSS. A
visit's pass (its repeat) is a term of the fit, so drift between passes does not bias an axis.
Effects are ratios against the axis's first level in the matrix; `low` and `high` bound a 95%
interval.
"""
from __future__ import annotations

import math
from pathlib import Path

import matplotlib.ticker
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from harness.analysis.effects import (
    EFFECTS,
    HOST_RATE,
    MIN_EFFECT,
    MIN_PASSES,
    NO_EFFECT,
    THROUGHPUT,
    Effect,
    fit_effects,
    level_order,
    observations,
    order_effects,
)
from harness.report.tables import Table
from harness.results import fileformat
from harness.results.cellresult import CellResult

# effects.jsonl's `figure` -> (the Figures attribute, the label in tables)
FIGURES = {"throughput": ("throughput", "samples/s"), "host_rate": ("host_rate", "host rate (cores/CPU s)"),
           "au": ("au_pct", "AU %"),
           "device_memory": ("device_peak_gb", "device peak GB"), "host_memory": ("host_pss_peak_mb", "host PSS MB")}

ADJUSTED = (THROUGHPUT, HOST_RATE)  # fitted with the visit's outside load as a covariate


def run_effects(results: list[CellResult], cell_ids: list[str] | None = None) -> list[Effect]:
    """Every figure's effects over the run's measured visits ([] with fewer visits than terms)."""
    order = level_order(results, cell_ids)
    out = []
    for figure, (attribute, _) in FIGURES.items():  # the two responses adjusted (outside load, references)
        out += fit_effects(observations(results, attribute, adjust=figure in ADJUSTED), order, figure)
    return out + order_effects(results, order)  # the order figures (none for lines without them)


def write_effects(run_dir: Path, effects: list[Effect]) -> Path:
    """effects.jsonl, one Effect a line, of the current version (harness.analysis.effects.EFFECTS),
    replaced atomically."""
    path = Path(run_dir) / "effects.jsonl"
    fileformat.write_lines(path, [e.to_json() for e in effects], EFFECTS)
    return path


def read_effects(run_dir: Path) -> list[Effect]:
    """A run directory's effects.jsonl, older versions upgraded on read ([] when there is none); a
    damaged or newer line is a harness.results.fileformat.ResultsError."""
    return fileformat.read_lines(Path(run_dir) / "effects.jsonl", EFFECTS, Effect.from_json)


def _ratio(e: Effect) -> str:
    return f"x{e.ratio:.2f} [{e.low:.2f}, {e.high:.2f}]"


def verdict_word(e: Effect, min_effect: float = MIN_EFFECT, passes: int | None = None) -> str:
    """The level's decision in words (harness.analysis.effects.Effect.decision)."""
    word = e.decision(min_effect, passes)
    return f"no effect larger than {min_effect:.0%}" if word == NO_EFFECT else word


def effects_table(effects: list[Effect], emulated: bool, min_effect: float = MIN_EFFECT,
                  matrix_order: dict[str, list[str]] | None = None, passes: int | None = None,
                  decided: dict[tuple[str, str], str] | None = None) -> Table:
    """One row per axis level: its effect on each figure, ratio [95% interval] against the
    reference, and its decision. `matrix_order`: each axis's levels as the matrix lists them, to
    name a level no visit measured. `decided`: (axis, level) -> the stopping rule's decision in
    words (harness.analysis.sequential), shown in a column of its own; the two responses' cells
    then show their intervals only."""
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
            word = "" if decided is not None and f in ADJUSTED else f" {verdict_word(e, min_effect, passes)}"
            row.append("-" if e is None else ("1" if level == e.reference else f"{_ratio(e)}{word}"))
        if decided is not None:
            row.append(decided.get((axis, level), "reference" if level == ref else "-"))
        rows.append(row)
    headers = ["axis", "level", "against"] + [
        FIGURES[f][1] + (mark if f in ("throughput", "au", "device_memory") else "") for f in figures] + (
        ["decision (the stopping rule's)"] if decided is not None else [])
    notes = ["ratio of the figure against the axis's first level, averaged over the other axes, with a 95% "
             "interval from every cell and visit (least squares on the log figure, a term per level and per "
             f"pass); higher / lower: the interval excludes 1; no effect larger than {min_effect:.0%}: it lies "
             f"inside [1/{1 + min_effect:g}, {1 + min_effect:g}] (--min-effect); open: neither; identical in every "
             "cell: the figure did not vary, nothing to decide"]
    if passes is not None and passes < MIN_PASSES:
        notes.append(f"{passes} whole pass so far: nothing is decided before {MIN_PASSES} (one pass's interval "
                     "misses what changes from run to run; --repeats 2, or --budget)")
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


def effects_plot(effects: list[Effect], path: Path, figure: str = "throughput",
                 min_effect: float = MIN_EFFECT, passes: int | None = None,
                 decided: tuple[str, list[tuple[Effect, str]]] | None = None) -> Path | None:
    """plots/effects.png (effects_figure), or None with no level to show."""
    fig = effects_figure(effects, figure, min_effect, passes, decided)
    if fig is None:
        return None
    from harness.report.plots import save_png

    return save_png(fig, path)


def effects_figure(effects: list[Effect], figure: str = "throughput", min_effect: float = MIN_EFFECT,
                   passes: int | None = None, decided: tuple[str, list[tuple[Effect, str]]] | None = None):
    """A forest plot: a point and a bar per level on a log axis ticked x0.9, x1.0, x1.1 ..., the
    band of no effect larger than m shaded, and each row's decision written beside it. `decided`:
    (the response's name, [(the level's effect at its deciding look, the stopping rule's words)]):
    those are shown, each with its repeated interval; else one figure's one-look 95% effects with
    their one-look words."""
    if decided is not None:
        name, pairs = decided
        pairs = [(e, word) for e, word in pairs if math.isfinite(e.high) and e.low > 0]
        what = f"{name}: ratio against the axis's first level, the stopping rule's interval at its deciding look"
    else:
        pairs = [(e, verdict_word(e, min_effect, passes)) for e in effects
                 if e.figure == figure and e.kind == "main" and e.level != e.reference]
        what = f"{FIGURES[figure][1]}: ratio against the axis's first level, 95% interval"
    if not pairs:
        return None
    shown = [e for e, _ in pairs]
    labels = [f"{e.axis}={e.level}\nvs {e.reference}" for e in shown]
    fig = Figure(figsize=(9.0, 1.6 + 0.55 * len(shown)), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    y = np.arange(len(shown))[::-1]
    ratio = np.array([e.ratio for e in shown])
    err = np.array([[e.ratio - e.low for e in shown], [e.high - e.ratio for e in shown]])
    ax.axvspan(1 / (1 + min_effect), 1 + min_effect, color="#dddddd", zorder=0)
    ax.errorbar(ratio, y, xerr=err, fmt="o", color="#1f77b4", capsize=3)
    ax.axvline(1.0, color="#7f7f7f", linestyle="--", linewidth=1)
    ax.set_xscale("log")
    low = min(min(e.low for e in shown), 1 / (1 + min_effect)) / 1.02
    high = max(max(e.high for e in shown), 1 + min_effect) * 1.02
    ax.set_xlim(low, high)
    ticks = _ratio_ticks(low, high)
    ax.set_xticks(ticks, [f"x{t:.1f}" if abs(t * 10 - round(t * 10)) < 1e-9 else f"x{t:.2f}" for t in ticks])
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax.set_yticks(y, labels, fontsize=8)
    for yi, (_, word) in zip(y, pairs):
        ax.annotate(word, (1.0, yi), xycoords=("axes fraction", "data"),
                    xytext=(6, 0), textcoords="offset points", va="center", fontsize=8)
    ax.set_xlabel(f"{what} (grey: within {min_effect:.0%})")
    ax.set_title("Effect of each choice")
    fig.tight_layout()
    fig.subplots_adjust(right=0.78)  # room for the decisions
    return fig


def _ratio_ticks(low: float, high: float) -> list[float]:
    """Ratios to tick between low and high: steps of 0.05, 0.1, 0.25 or 0.5 (at most about 8
    ticks), 1 among them."""
    for step in (0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0):
        ticks = [round(k * step, 2) for k in range(max(1, int(low / step)), int(high / step) + 1)
                 if low <= k * step <= high]
        if len(ticks) <= 8:
            return ticks
    return [1.0]
