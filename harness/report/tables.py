"""What every table of results shares: the Table type, the one renderer (terminal text or markdown), number
formatting, the throughput's interval and ties, and how a cell's strategies are labelled. The report, the
articles' tables and the plots import this module; none imports another's helpers.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from tabulate import tabulate

from harness.analysis.intervals import Interval, ahead, interval_of, tied
from harness.results.cellresult import CellResult
from harness.results.repeats import CellSummary
from strategies.registry import AXES

EMULATED_MARK = "*"  # marks columns whose values depend on the emulated accelerator's model
TIE_NOTE = ("= marks a tie: the cell's throughput interval overlaps another's, so the data do not tell them "
            "apart; # is 1 + the number of cells whose interval lies wholly above this one's (- for a cell without an "
            "interval, which is tied with none; overlap is a conservative test: some overlapping pairs may still "
            "differ)")


@dataclass
class Table:
    title: str
    headers: list[str]
    rows: list[list[str]]
    notes: list[str] = field(default_factory=list)  # footnotes, printed under the table


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
        if t.notes:
            lines += [""] + render_lines(t.notes, fmt) if markdown else t.notes
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


# --- throughput intervals and ties ------------------------------------------------------------------------

def interval(result: CellResult) -> Interval | None:
    """The throughput's interval: the cell's `throughput_ci` (batch means within the run, or across repeats
    once merged; for a line written before the figure existed, derived on read from its ranks' recorded
    steps: harness.results.cellresult.upgrade); None when unmeasured or without one (harness.analysis.intervals
    decides)."""
    return interval_of(result)


def fmt_throughput(result: CellResult, value: float | None = None) -> str:
    """"1082 [1010, 1150]": the estimate and its interval (never a symmetric +-)."""
    value = result.figures.throughput if value is None else value
    iv = interval(result)
    if iv is None:
        return fmt(value, ".0f")
    return f"{value:.0f} [{iv.low:.0f}, {iv.high:.0f}]"


def interval_header(results: list[CellResult]) -> tuple[str, bool]:
    """(the words for the samples/s header, whether each row needs its own label): one shared label goes in
    the header ("[95% CI, batch means, 10 blocks]"); differing labels go in an "interval" column."""
    labels = {iv.label for iv in (interval(r) for r in results) if iv is not None}
    if not labels:
        return "", False
    if len(labels) == 1:
        return f" [{labels.pop()}]", False
    return " [interval]", True


def interval_label_of(result: CellResult) -> str:
    iv = interval(result)
    return iv.label if iv else "-"


def compare_intervals(a: CellResult | None, b: CellResult | None) -> str:
    """a against b: "faster" / "slower" when their intervals do not overlap, "tie" when they do, "no interval"
    when either has none, "-" when either is missing or unmeasured."""
    if a is None or b is None or not a.measured or not b.measured:
        return "-"
    if interval(a) is None or interval(b) is None:
        return "no interval"
    if tied(a, b):
        return "tie"
    return "faster" if ahead(a, b) else "slower"


def repeats_text(cell: CellSummary) -> str:
    """Measured repeats, and the failed ones when there are any: "3", "4 of 5 (1 failed)"."""
    repeats = getattr(cell, "repeats", 1)
    failed = getattr(cell, "failed_repeats", 0)
    if not failed:
        return str(repeats)
    return f"{repeats} of {repeats + failed} ({failed} failed)"
