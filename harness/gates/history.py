"""The history gate: a run's cells against the same cells in the last K comparable runs of the
store (same scenario, machine fingerprint and settings hash, earlier in time), each cell by the
lookback test (harness.gates.lookback) at alpha / cells (Bonferroni: with unchanged code the
chance that any cell is called slower stays under alpha, the family-wise rate the A/B gate's
sign-flip maximum over cells holds too).

The figure it gates on by default (DEFAULT, "stages/decode") is the loader's timed stages' CPU per
sample over its decode stage's, both measured in the same visit by the same thread clocks
(harness.train.stagetimer): a ratio in which the machine's load cancels. On a shared machine a
run's CPU per sample moves with the load of its minutes (the other processes on the same cores slow
every instruction: caches, the SMT sibling), by -39% .. +42% for loader + rank ("cpu") in 10
same-code runs, which buries a loader regression; the decode stage is the same library work on the
same samples in every run and every cell, slowed by the load as the other stages are, so the ratio
keeps what the code added to the loader and drops what the load added to all of it (docs/history.md
has the measured spreads and power). What it cannot see: a regression in the decode stage itself
(it is the reference; the "stages" figure sees it, and "cpu" one in the rank) and, in a workload
without a decode stage (features), anything: there the gate says so and --figure cpu or stages
gates instead.

A cell's value in a run is the median of its measured visits there. Exit 1 when a cell is "slower"
or errored now where every history run measured it; fewer than MIN_RUNS comparable runs is NOT RUN,
exit 0 (a fresh clone has no history: never a false failure). The run gated is never part of its
own history.
"""
from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from harness.errors import UsageError
from harness.gates.lookback import MIN_RUNS, LookbackResult, lookback
from harness.history import database, runrows
from harness.history.series import cell_values


def _ratio(top: str, bottom: str):
    def value(visit):
        a, b = visit[top], visit[bottom]
        return a / b if a is not None and b else None
    return value


def _column(name: str):
    return lambda visit: visit[name]


def _stored_or_ratio(name: str, top: str, bottom: str):
    """The visit's stored figure (store version 3: the cell's own, harness.results.metrics), or for
    a row of an older store the same ratio of its two columns."""
    ratio = _ratio(top, bottom)

    def value(visit):
        stored = visit[name] if name in visit.keys() else None
        return stored if stored is not None else ratio(visit)
    return value


def _stored(name: str):
    return lambda visit: visit[name] if name in visit.keys() else None


# figure -> (its value in a visit row, lower is better, what it is)
METRICS = {"stages/decode": (_stored_or_ratio("loader_vs_decode", "loader_stages_cpu", "decode_cpu"), True,
                             "the loader's timed stages' CPU over its decode stage's"),
           "decode/reference": (_stored("decode_vs_reference"), True,
                                "the decode stage's CPU over the reference decode's"),
           "rank/reference": (_stored("rank_vs_reference"), True,
                              "the rank's main thread's CPU over the reference step's"),
           "stages": (_column("loader_stages_cpu"), True, "the loader's timed stages, CPU s/sample"),
           "cpu": (_column("cpu_per_sample"), True, "loader + rank CPU s/sample"),
           "throughput": (_column("throughput"), False, "throughput, samples/s")}
DEFAULT = "stages/decode"
FIGURES = ("stages/decode", "decode/reference", "rank/reference")  # the A/B's and the baseline gate's three


@dataclass
class GateRow:
    cell: str
    value: float | None
    result: LookbackResult | None
    verdict: str
    regression: bool = False


@dataclass
class HistoryGate:
    rows: list[GateRow]
    history: list[sqlite3.Row]  # the comparable runs used, oldest first
    metric: str
    alpha: float
    min_effect: float
    warnings: list[str] = field(default_factory=list)

    @property
    def ran(self) -> bool:
        return len(self.history) >= MIN_RUNS and any(r.value is not None or r.verdict == "error" for r in self.rows)

    @property
    def exit_code(self) -> int:
        return 1 if self.ran and any(r.regression for r in self.rows) else 0




def comparable_runs(db: sqlite3.Connection, run: dict, last: int, branch: str | None = None) -> list[sqlite3.Row]:
    """The last `last` runs before `run` of its scenario, machine fingerprint and settings (and
    `branch`)."""
    sql = ("SELECT * FROM runs WHERE scenario = ? AND machine_fp = ? AND settings_hash = ? AND run_key != ? "
           "AND time_utc < ?" + (" AND branch = ?" if branch else "") + " ORDER BY time_utc DESC, id DESC LIMIT ?")
    args = [run["scenario"], run["machine_fp"], run["settings_hash"], run["run_key"], run["time_utc"]]
    rows = db.execute(sql, args + ([branch] if branch else []) + [last]).fetchall()
    return rows[::-1]


def _row(cell: str, value, errored: bool, series: list[float], alpha: float, min_effect: float,
         lower: bool) -> GateRow:
    if errored:
        return GateRow(cell, None, None, "error", regression=len(series) >= MIN_RUNS)
    if value is None:
        return GateRow(cell, None, None, "missing")
    if not series:
        return GateRow(cell, value, None, "new")
    result = lookback(series, value, alpha, min_effect, lower)
    return GateRow(cell, value, result, result.verdict, regression=result.verdict == "slower")


def gate(db: sqlite3.Connection, run: dict, visits: list, metric: str = DEFAULT, last: int = 10,
         min_effect: float = 0.15, alpha: float = 0.05, branch: str | None = None) -> HistoryGate:
    """`run` (a runs row, stored or not) and its visits against its comparable history."""
    figure, lower, _ = METRICS[metric]
    history = comparable_runs(db, run, last, branch)
    past = [cell_values(database.visits_of(db, h["id"]), figure) for h in history]
    now = cell_values(visits, figure)
    errored = {v["cell"] for v in visits if v["error"]} - set(now)
    cells = list(dict.fromkeys([*now, *sorted(errored), *sorted({c for p in past for c in p})]))
    each = alpha / max(1, len(now))
    rows = [_row(c, now.get(c), c in errored, [p[c] for p in past if c in p], each, min_effect, lower)
            for c in cells]
    warnings = []
    if not now and not errored:
        warnings.append(f"NOT RUN: no cell of this run has the figure {metric} (a run without timed loader stages, "
                        f"or without a decode stage: a features workload); pass --figure cpu or --figure stages")
    elif len(history) < MIN_RUNS:
        warnings.append(f"NOT RUN: {len(history)} comparable run(s) in the history (scenario {run['scenario']}, "
                        f"this machine, these settings); the history gate needs {MIN_RUNS}: exit 0, no verdict")
    return HistoryGate(rows, history, metric, alpha, min_effect, warnings)


def from_request(db: sqlite3.Connection, request) -> int:
    """`run_bench.py history gate RUN_DIR` (harness.commands.history's request, handed here by
    harness/cli/): the run directory against the store, the table printed; the gate's exit code."""
    figure = request.figure or DEFAULT
    if figure not in METRICS:
        raise UsageError(f"history gate --figure {figure}: the gate compares {', '.join(METRICS)}; "
                         f"pass one of them (default {DEFAULT})")
    run, visits, _ = runrows.rows_of(Path(request.args[0]), request.branch)
    result = gate(db, run, visits, figure, request.last, request.min_effect, request.alpha, request.branch or None)
    print(render(result))
    return result.exit_code


def render(result: HistoryGate) -> str:
    """The gate's table and its summary line, as text."""
    lines = [f"{'cell':60s} {'now':>10s} {'history':>10s} {'ratio':>8s} {'t':>6s} {'band':>15s}  verdict"]
    for r in result.rows:
        res = r.result
        geo = r.value / res.ratio if res and res.ratio else None
        band = f"[{res.band[0]:.2f}, {res.band[1]:.2f}]" if res and res.band else ""
        lines.append(f"{r.cell[:60]:60s} {_num(r.value):>10s} {_num(geo):>10s} "
                     f"{(f'x{res.ratio:.3f}' if res and res.ratio else ''):>8s} "
                     f"{(f'{res.t:+.2f}' if res and res.t is not None else ''):>6s} {band:>15s}  {r.verdict}")
    lines.append(f"history gate: {summary(result)}: {'FAILED' if result.exit_code else 'passed'}")
    return "\n".join(lines + result.warnings)


def summary(result: HistoryGate) -> str:
    """The verdicts counted and what they were judged on, without the gate's pass or fail."""
    _, _, name = METRICS[result.metric]
    counts = {v: sum(r.verdict == v for r in result.rows) for v in ("slower", "faster", "unchanged", "inconclusive",
                                                                    "error", "new", "missing")}
    shown = ", ".join(f"{n} {v}" for v, n in counts.items() if n or v in ("slower", "faster", "unchanged"))
    each = result.alpha / max(1, sum(r.value is not None for r in result.rows))
    return (f"{shown} (metric: {name}, against the last {len(result.history)} comparable runs, min effect "
            f"{result.min_effect:.0%}, alpha {result.alpha:g} over the cells, {each:.2g} each)")


def _num(v) -> str:
    return "" if v is None else f"{v:.4g}"
