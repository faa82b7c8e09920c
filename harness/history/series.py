"""What the queries and the dashboard read from the store: a figure of a cell (or an axis's effect)
per run, in commit order, and grouped per commit with its interval.

Commit order is the order of each commit's first run in time (the store keeps no commit graph): on
one branch that is the order the commits were measured in. Figures: "cpu" (loader + rank CPU
s/sample), "throughput" (samples/s), "au" (AU %). A run's value for a cell is the median of its
measured visits (cell_values); a commit's is the median of its runs, with the order-statistics
interval of harness.results.stats.median_interval over its runs, or, for a commit of one run, over
that run's visits (its label says which).
"""
from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass

from harness.errors import UsageError
from harness.history import database
from harness.results import stats

FIGURES = {"cpu": ("cpu_per_sample", "loader + rank CPU s/sample"), "throughput": ("throughput", "samples/s"),
           "au": ("au_pct", "AU %")}
EFFECT_FIGURES = {"cpu": "throughput", "throughput": "throughput", "au": "au"}  # effects.jsonl has no cpu fit


@dataclass(frozen=True)
class Point:
    commit: str
    value: float
    low: float
    high: float
    runs: int
    label: str

def cell_values(visits, figure) -> dict[str, float]:
    """cell -> the median of its measured visits' `figure` (a function of a visit; cells without a
    value are left out)."""
    by_cell: dict[str, list[float]] = {}
    for v in visits:
        value = figure(v)
        if not v["error"] and value is not None and value > 0:
            by_cell.setdefault(v["cell"], []).append(value)
    return {c: stats.median(xs) for c, xs in by_cell.items()}


def column_of(figure: str) -> str:
    if figure not in FIGURES:
        raise UsageError(f"--figure {figure}: not a figure of the history; pass one of {', '.join(FIGURES)}")
    return FIGURES[figure][0]


def groups(db: sqlite3.Connection, scenario: str | None = None) -> dict[tuple[str, str], list[sqlite3.Row]]:
    """(scenario, machine fingerprint) -> its runs, oldest first."""
    out: dict[tuple[str, str], list[sqlite3.Row]] = {}
    for run in database.runs(db, scenario):
        out.setdefault((run["scenario"], run["machine_fp"]), []).append(run)
    return out


def machine_name(run: sqlite3.Row) -> str:
    m = json.loads(run["machine"])
    gpus = ", ".join(m.get("gpus") or []) or "no GPU"
    return (f"{m.get('cpu_model')}, {m.get('cpu_affinity') or m.get('cpu_count')} cores allowed of "
            f"{m.get('cpu_count')}, {m.get('memory_gb')} GB, {gpus}, torch {m.get('torch')}")


def cell_runs(db: sqlite3.Connection, runs: list[sqlite3.Row], figure: str) -> dict[str, list[tuple[str, float]]]:
    """cell -> [(commit, the run's value)] over `runs` in order."""
    column = column_of(figure)
    out: dict[str, list[tuple[str, float]]] = {}
    for run in runs:
        for cell, value in cell_values(database.visits_of(db, run["id"]), lambda v: v[column]).items():
            out.setdefault(cell, []).append((run["commit_id"], value))
    return out


def per_commit(db: sqlite3.Connection, runs: list[sqlite3.Row], cell: str, figure: str) -> list[Point]:
    """The cell's figure per commit, with its interval."""
    column = column_of(figure)
    by_commit: dict[str, list[list[float]]] = {}
    for run in runs:
        visits = [v[column] for v in database.visits_of(db, run["id"])
                  if v["cell"] == cell and not v["error"] and v[column] is not None and v[column] > 0]
        if visits:
            by_commit.setdefault(run["commit_id"], []).append(visits)
    points = []
    for commit, per_run in by_commit.items():
        values = [stats.median(v) for v in per_run] if len(per_run) > 1 else per_run[0]
        iv = stats.median_interval(values)
        label = f"{len(per_run)} runs: {iv['label']}" if len(per_run) > 1 else f"1 run: {iv['label']}"
        points.append(Point(commit, stats.median([stats.median(v) for v in per_run]), iv["low"], iv["high"],
                            len(per_run), label))
    return points


def effect_points(db: sqlite3.Connection, runs: list[sqlite3.Row], axis: str, figure: str) -> dict[str, list]:
    """level -> [(commit, ratio, low, high)] of the axis's effect per run (the run's own fit and
    interval)."""
    fitted = EFFECT_FIGURES.get(figure, figure)
    out: dict[str, list] = {}
    for run in runs:
        for e in database.effects_of(db, run["id"]):
            if e["axis"] == axis and e["figure"] == fitted and e["kind"] == "main" and e["level"] != e["reference"]:
                out.setdefault(e["level"], []).append((run["commit_id"], e["ratio"], e["low"], e["high"]))
    return out


def axes_of(db: sqlite3.Connection, runs: list[sqlite3.Row]) -> list[str]:
    names = []
    for run in runs:
        names += [e["axis"] for e in database.effects_of(db, run["id"]) if e["kind"] == "main"]
    return list(dict.fromkeys(names))
