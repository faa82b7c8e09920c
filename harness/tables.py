"""What every table of results shares: the Table type, the one renderer (terminal text or markdown), number
formatting, and how a cell's strategies are labelled. The report, the articles' tables and the plots import
this module; none imports another's helpers.
"""
from __future__ import annotations

from dataclasses import dataclass

from tabulate import tabulate

from harness.records import CellResult
from strategies.registry import AXES

EMULATED_MARK = "*"  # marks columns whose values depend on the emulated accelerator's model
OVERRUN_WARN_PCT = 10  # warn when more steps than this outran the modelled accelerator step


@dataclass
class Table:
    title: str
    headers: list[str]
    rows: list[list[str]]


def render_tables(tables: list[Table], fmt: str = "text", level: int = 2) -> list[str]:
    """Lines of the tables that have rows, each under its title: "text" for a terminal (title, then the
    table), "markdown" (a heading of `level`, a blank line, a GitHub table)."""
    if fmt not in ("text", "markdown"):
        raise ValueError(f"fmt must be 'text' or 'markdown', got {fmt!r}")
    markdown = fmt == "markdown"
    lines = []
    for t in tables:
        if not t.rows:
            continue
        lines += ["", f"{'#' * level} {t.title}", ""] if markdown else ["", t.title]
        lines.append(tabulate(t.rows, headers=t.headers, tablefmt="github" if markdown else "simple",
                              disable_numparse=True))
    return lines


def render_lines(lines: list[str], fmt: str = "text") -> list[str]:
    """Prose lines: as they are for a terminal; with a markdown line break for markdown."""
    return [f"{line}  " for line in lines] if fmt == "markdown" else list(lines)


def fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def short_error(result: CellResult) -> str:
    error = result.error or "no steps"
    return "OOM" if error.startswith("OOM") else error[:60]


def emulated(results: list[CellResult]) -> bool:
    return any(r.emulated for r in results)


def mark(results: list[CellResult]) -> str:
    """The emulation mark for column headers, or "" when nothing is emulated."""
    return EMULATED_MARK if emulated(results) else ""


def common_axes(results: list[CellResult]) -> list[str]:
    """Axes every result has, in AXES order."""
    return [a for a in AXES if results and all(a in r.strategies for r in results)]


def shown_axes(results: list[CellResult]) -> list[str]:
    """Axes every result has, in AXES order; only those whose strategy varies (at least the first)."""
    common = common_axes(results)
    varying = [a for a in common if len({r.label(a) for r in results}) > 1]
    return varying or common[:1]


def display_name(results: list[CellResult], result: CellResult, axis: str) -> str:
    """The strategy's name where that is unambiguous among these results, else its label with parameters."""
    name = result.name(axis)
    labels = {r.label(axis) for r in results if r.name(axis) == name}
    return name if len(labels) == 1 else result.label(axis)


def stack_label(results: list[CellResult], result: CellResult, axes: list[str]) -> str:
    return "/".join(display_name(results, result, a) for a in axes)


def strategy_notes(results: list[CellResult]) -> list[str]:
    """One note per strategy shown by its name but run with parameters: "axis=name: label"."""
    notes = {}
    for a in AXES:
        for r in results:
            label = r.label(a)
            if label != r.name(a) and display_name(results, r, a) != label:
                notes[f"{a}={r.name(a)}"] = label
    return [f"{k}: {v}" for k, v in notes.items()]


def emulation_lines(results: list[CellResult]) -> list[str]:
    """The emulation banner and, where the host could not keep up, the overrun warning (print them once)."""
    if not emulated(results):
        return []
    lines = [f"ACCELERATOR EMULATED: no such GPU here; each step's real CPU compute is padded to the "
             f"modelled step time and device memory is modelled. Columns marked {EMULATED_MARK} "
             f"depend on that model. The DDP allreduce, data loading and host memory are real."]
    worst = max((r.figures.get("overrun_pct", 0) for r in results), default=0)
    if worst > OVERRUN_WARN_PCT:
        lines.append(f"WARNING: in up to {worst:.0f}% of steps (column CPU>model %) the real CPU step took "
                     f"longer than the modelled accelerator step: this host cannot emulate it at full speed, "
                     f"so throughput and AU understate the accelerator. Use fewer ranks or a bigger host.")
    return lines
