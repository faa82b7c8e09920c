"""What every table of results shares: the Table type, the one renderer (terminal text or
markdown), number formatting, the throughput's interval and ties, how a cell's strategies are
labelled, and the order tables (how random a cell's batches were beside its samples/s, and each
choice's effect on both). The report, the articles' tables and the plots import this module; none
imports another's helpers.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from tabulate import tabulate

from harness.analysis.effects import MIN_EFFECT, ORDER_FIGURES, Effect
from harness.analysis.ties import Interval, ahead, interval_of, tied
from harness.results.cellresult import CellResult
from harness.results.orderquality import AS_SHUFFLE, OrderFigures
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
    """Lines of the tables that have rows, each under its title: "text" for a terminal (title, then
    the table), "markdown" (a heading of `level`, a blank line, a GitHub table)."""
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
    """Axes every result has, in AXES order; only those whose strategy varies (at least the
    first)."""
    common = common_axes(results)
    varying = [a for a in common if len({r.label(a) for r in results}) > 1]
    return varying or common[:1]


def display_name(results: list[CellResult], result: CellResult, axis: str) -> str:
    """The strategy's name where that is unambiguous among these results, else its label with
    parameters."""
    name = result.name(axis)
    labels = {r.label(axis) for r in results if r.name(axis) == name}
    return name if len(labels) == 1 else result.label(axis)


def stack_label(results: list[CellResult], result: CellResult, axes: list[str]) -> str:
    return "/".join(display_name(results, result, a) for a in axes)


# --- throughput intervals and ties ------------------------------------------------------------------------

def interval(result: CellResult) -> Interval | None:
    """The throughput's interval: the cell's `throughput_ci` (batch means within the run, or across
    repeats once merged; for a line written before the figure existed, derived on read from its
    ranks' recorded steps: harness.results.cellresult.upgrade); None when unmeasured or without one
    (harness.analysis.ties decides)."""
    return interval_of(result)


def fmt_throughput(result: CellResult, value: float | None = None) -> str:
    """"1082 [1010, 1150]": the estimate and its interval (never a symmetric +-)."""
    value = result.figures.throughput if value is None else value
    iv = interval(result)
    if iv is None:
        return fmt(value, ".0f")
    return f"{value:.0f} [{iv.low:.0f}, {iv.high:.0f}]"


def interval_header(results: list[CellResult]) -> tuple[str, bool]:
    """(the words for the samples/s header, whether each row needs its own label): one shared label
    goes in the header ("[95% CI, batch means, 10 blocks]"); differing labels go in an "interval"
    column."""
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
    """a against b: "faster" / "slower" when their intervals do not overlap, "tie" when they do,
    "no interval" when either has none, "-" when either is missing or unmeasured."""
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


# --- the order's randomness beside samples/s ---------------------------------------------------------------

ORDER_NOTE = ("How random each cell's order was over its measured window, each figure against the ideal shuffle's "
              "mean +- sd (of the mean over the window's batches; harness.results.orderquality): units = the "
              "storage's shards, chunks or row groups (blocks of 64 positions for a storage without them) met per "
              "batch; rho = Spearman's rank correlation of storage position against position in the epoch (0 "
              "for a shuffle); TV = the batches' total-variation distance from the dataset's class mix (data with "
              "[dataset] classes, clustered in storage order). as a shuffle: within mean +- 1.96 sd; less mixed / "
              "more even: beyond it. The ideal's TV spread is a seeded Monte-Carlo; the other references are exact")


def order_decisions(f) -> dict[str, str | None]:
    """A cell's order figures decided against the ideal shuffle
    (harness.results.orderquality.decision)."""
    return OrderFigures(0, 0, f.order_units_per_batch, f.order_units_ideal, f.order_units_ideal_sd,
                        f.order_position_rho, f.order_position_ideal_sd, f.order_label_tv, f.order_label_tv_ideal,
                        f.order_label_tv_ideal_sd).decisions()


def _against(value: float | None, mean: float | None, sd: float | None, word: str | None, spec: str) -> str:
    if value is None:
        return "-"
    return f"{value:{spec}} vs {mean:{spec}} +- {sd:{spec}} {word}"


def _order_values(c: CellSummary) -> list[str] | None:
    f = c.figures
    if f.order_units_per_batch is None:
        return None
    d = order_decisions(f)
    words = [w for w in d.values() if w is not None]
    verdict = "yes" if all(w == AS_SHUFFLE for w in words) else "no: " + ", ".join(
        name for name, w in d.items() if w not in (None, AS_SHUFFLE))
    return [fmt_throughput(c) if c.measured else short_error(c),
            _against(f.order_units_per_batch, f.order_units_ideal, f.order_units_ideal_sd, d["units"], ".2f"),
            _against(f.order_position_rho, 0.0, f.order_position_ideal_sd, d["position"], ".3f"),
            _against(f.order_label_tv, f.order_label_tv_ideal, f.order_label_tv_ideal_sd, d["labels"], ".3f"),
            verdict]


def order_table(cells: list[CellSummary]) -> Table:
    """Each cell's samples/s beside how random its order was (cells that recorded no order have no
    row)."""
    axes = shown_axes(cells)
    headers = [*axes, f"samples/s{mark(cells[:1])}", "units/batch vs shuffle", "position rho vs shuffle",
               "label TV vs shuffle", "as a shuffle?"]
    rows = [[display_name(cells, c, a) for a in axes] + shown for c in cells
            if (shown := _order_values(c)) is not None]
    return Table("Order: how random each cell's batches were, beside its speed", headers, rows, [ORDER_NOTE])


def order_effects_table(effects: list[Effect], min_effect: float = MIN_EFFECT, passes: int | None = None) -> Table:
    """Each axis level's effect on samples/s and on the order figures, on one screen (rows only
    where an order figure was fitted)."""
    figures = ["throughput", *(f for f in ORDER_FIGURES if any(e.figure == f for e in effects))]
    by = {(e.figure, e.axis, e.level): e for e in effects if e.kind == "main"}
    levels = list(dict.fromkeys((e.axis, e.level, e.reference) for e in effects
                                if e.kind == "main" and e.figure in ORDER_FIGURES and e.level != e.reference))
    rows = []
    for axis, level, ref in levels:
        cells = [by.get((f, axis, level)) for f in figures]
        rows.append([axis, level, f"vs {ref}"] + ["-" if e is None else
                                                  f"x{e.ratio:.2f} [{e.low:.2f}, {e.high:.2f}] "
                                                  f"{e.decision(min_effect, passes)}" for e in cells])
    headers = ["axis", "level", "against", "samples/s", *(ORDER_FIGURES[f][1] for f in figures[1:])]
    notes = ["the order figures' ratios are 1 for an ideal shuffle and lower for a more ordered read: units met "
             "per batch / the shuffle's, 1 - |rho|, the shuffle's TV distance / the batches'; each level's effect "
             "against the axis's first level as in the effects table, main effects only; a cell's order is a "
             "pure function of its seeds, so its repeats agree: each interval also holds the noise of the "
             "order's one draw (the ideal shuffle's sd of the figure). 'as a shuffle?' in the order table "
             "decides each cell against the shuffle's own spread"]
    return Table("Effect of each choice on speed and on the order's randomness", headers, rows, notes)
