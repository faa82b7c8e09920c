"""The questions a person asks of the history, as text: `history list`, `show CELL|AXIS`, `compare
A B` and `steps` (harness.history.series reads the store, harness.history.changepoints finds the
change points)."""
from __future__ import annotations

import sqlite3

from harness.errors import UsageError
from harness.history import series
from harness.history.changepoints import change_points
from harness.results import stats


def _short(commit: str) -> str:
    return commit[:10]


def list_text(db: sqlite3.Connection) -> str:
    """Runs per scenario and machine: how many, which commits, first and last time."""
    groups = series.groups(db)
    if not groups:
        return "the history is empty (add runs: run_bench.py history add RUN_DIR...)"
    lines = []
    for (scenario, fp), runs in sorted(groups.items()):
        commits = list(dict.fromkeys(r["commit_id"] for r in runs))
        lines.append(f"{scenario} on machine {fp} ({series.machine_name(runs[-1])}): {len(runs)} runs of "
                     f"{len(commits)} commits, {runs[0]['time_utc']} .. {runs[-1]['time_utc']}, last commit "
                     f"{_short(commits[-1])}")
        for run in runs[-5:]:
            gated = f"; gate: {run['gate']}" if run["gate"] else ""
            lines.append(f"  {run['time_utc']}  {_short(run['commit_id'])}{'+dirty' if run['dirty'] else ''}  "
                         f"{run['branch'] or '-'}  {run['repeats']} repeat(s)  {run['run_dir']}{gated}")
    return "\n".join(lines)


def _cells_matching(cells: list[str], what: str) -> list[str]:
    exact = [c for c in cells if c == what]
    return exact or [c for c in cells if what in c]


def show_text(db: sqlite3.Connection, what: str, scenario: str | None, figure: str) -> str:
    """A cell's (or every cell's containing WHAT) figure over commits, or an axis's effect over
    commits."""
    series.column_of(figure)
    out = []
    for (sc, fp), runs in sorted(series.groups(db, scenario).items()):
        cells = list(series.cell_runs(db, runs, figure))
        matched = _cells_matching(cells, what)
        axes = series.axes_of(db, runs)
        if what in axes:
            out.append(_axis_text(db, runs, what, figure, f"{sc} on {fp}"))
        for cell in matched:
            out.append(_cell_text(db, runs, cell, figure, f"{sc} on {fp}"))
    if not out:
        raise UsageError(f"history show {what}: no cell or axis of that name in the history"
                         f"{f' of scenario {scenario}' if scenario else ''}; see run_bench.py history list")
    return "\n\n".join(out)


def _cell_text(db, runs, cell: str, figure: str, where: str) -> str:
    name = series.FIGURES[figure][1]
    lines = [f"{cell} ({where}): {name} per commit, oldest first"]
    for p in series.per_commit(db, runs, cell, figure):
        lines.append(f"  {_short(p.commit)}  {p.value:.4g}  [{p.low:.4g}, {p.high:.4g}]  {p.label}")
    found, drifts = change_points(series.cell_runs(db, runs, figure).get(cell, []))
    lines += [f"  STEP at {_short(s.commit)} (after {_short(s.before)}): x{s.ratio:.3f} [{s.low:.3f}, {s.high:.3f}]"
              for s in found]
    lines += [f"  DRIFT over {d.commits} commits {_short(d.first)} .. {_short(d.last)}: x{d.change:.3f} "
              f"[{d.low:.3f}, {d.high:.3f}]" for d in drifts]
    if not found and not drifts:
        lines.append("  no step and no drift")
    return "\n".join(lines)


def _axis_text(db, runs, axis: str, figure: str, where: str) -> str:
    fitted = series.EFFECT_FIGURES.get(figure, figure)
    lines = [f"axis {axis} ({where}): each level's effect on {fitted} against the axis's first level, per run "
             f"(95% interval of the run's fit)"]
    for level, points in series.effect_points(db, runs, axis, figure).items():
        lines.append(f"  {level}:")
        lines += [f"    {_short(c)}  x{r:.3f}  [{lo:.3f}, {hi:.3f}]" for c, r, lo, hi in points]
    return "\n".join(lines)


def _commit_values(db, runs, commit: str, figure: str) -> dict[str, list[float]]:
    chosen = [r for r in runs if r["commit_id"].startswith(commit)]
    out: dict[str, list[float]] = {}
    for cell, values in series.cell_runs(db, chosen, figure).items():
        out[cell] = [v for _, v in values]
    return out


def compare_text(db: sqlite3.Connection, commit_a: str, commit_b: str, scenario: str | None, figure: str) -> str:
    """Every cell of commit B against commit A per scenario and machine: medians of their runs, the
    ratio."""
    out = []
    for (sc, fp), runs in sorted(series.groups(db, scenario).items()):
        a, b = (_commit_values(db, runs, c, figure) for c in (commit_a, commit_b))
        if not a or not b:
            continue
        lines = [f"{sc} on {fp}: {series.FIGURES[figure][1]}, {commit_b} against {commit_a}"]
        for cell in [c for c in a if c in b]:
            ma, mb = stats.median(a[cell]), stats.median(b[cell])
            lines.append(f"  {cell:60s} {ma:10.4g} ({len(a[cell])} runs) {mb:10.4g} ({len(b[cell])} runs)  "
                         f"x{mb / ma:.3f}")
        out.append("\n".join(lines))
    if not out:
        raise UsageError(f"history compare {commit_a} {commit_b}: no scenario has runs of both commits; see "
                         f"run_bench.py history list")
    return "\n\n".join(out)


def steps_text(db: sqlite3.Connection, scenario: str | None, figure: str) -> str:
    """The change points of every cell's figure, per scenario and machine."""
    out = []
    for (sc, fp), runs in sorted(series.groups(db, scenario).items()):
        lines = [f"{sc} on {fp}: {series.FIGURES[figure][1]}"]
        for cell, values in series.cell_runs(db, runs, figure).items():
            found, drifts = change_points(values)
            lines += [f"  {cell}: STEP at {_short(s.commit)} x{s.ratio:.3f} [{s.low:.3f}, {s.high:.3f}]"
                      for s in found]
            lines += [f"  {cell}: DRIFT {_short(d.first)} .. {_short(d.last)} x{d.change:.3f} "
                      f"[{d.low:.3f}, {d.high:.3f}]" for d in drifts]
        out.append("\n".join(lines if len(lines) > 1 else lines + ["  no step and no drift"]))
    return "\n\n".join(out) or "the history is empty"
