"""`run_bench.py history ACTION ...`: the history store (harness/history/) from the command line.

    history add RUN_DIR...               import run directories (or a directory of them)
    history list                         runs per scenario and machine
    history show CELL|AXIS               a figure over commits, its intervals and change points
    history compare COMMIT_A COMMIT_B    every cell of B against A (medians of their runs)
    history gate RUN_DIR                 the run against the last K comparable runs (1: slower)
    history steps                        the change points of every cell's figures
    history html OUT_DIR                 the static dashboard, one page per scenario

The store is --history FILE, else $DLBENCH_HISTORY, else results/history.sqlite (settled by
harness/cli/). `recorded` wraps the main run when asked (--history FILE or DLBENCH_HISTORY): the
store is opened before anything is measured, and the run directory the run wrote adds itself at its
end (`record`).
"""
from __future__ import annotations

import sqlite3
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from harness.config.request import BenchRequest
from harness.errors import EXIT_OK, EXIT_USAGE, UsageError
from harness.history import dashboard, database, queries, runrows
from harness.results import rundir
from harness.results.fileformat import ResultsError

DEFAULT_FIGURE = "cpu"  # show, compare, steps
ACTIONS = ("add", "list", "show", "compare", "gate", "steps", "html")
NEEDS = {"add": (1, None, "RUN_DIR..."), "list": (0, 0, ""), "show": (1, 1, "CELL|AXIS"),
         "compare": (2, 2, "COMMIT_A COMMIT_B"), "gate": (1, 1, "RUN_DIR"), "steps": (0, 0, ""),
         "html": (1, 1, "OUT_DIR")}


@dataclass(frozen=True)
class HistoryRequest:
    action: str
    args: tuple[str, ...] = ()
    store: Path = Path("results/history.sqlite")
    branch: str = ""
    scenario: str | None = None
    figure: str | None = None  # None: the action's own (DEFAULT_FIGURE, or the history gate's DEFAULT)
    last: int = 10
    min_effect: float = 0.15
    alpha: float = 0.05


def _check(request: HistoryRequest) -> None:
    low, high, shape = NEEDS[request.action]
    n = len(request.args)
    if n < low or (high is not None and n > high):
        raise UsageError(f"history {request.action} takes {shape or 'no arguments'}, got {n} "
                         f"({' '.join(request.args) or 'none'}); see run_bench.py history --help")
    if request.last < 1:
        raise UsageError(f"--last {request.last} must be a positive number of runs")


def run_dirs(path: Path) -> list[Path]:
    """`path` when it is a run directory, else the run directories directly inside it (sorted)."""
    if all((path / name).is_file() for name in runrows.REQUIRED) or not path.is_dir():
        return [path]
    inside = sorted(p for p in path.iterdir() if p.is_dir() and all((p / n).is_file() for n in runrows.REQUIRED))
    return inside or [path]


def add(db, paths: list[Path], branch: str = "", quiet: bool = False) -> int:
    """Each run directory into the store; a bad one is named in one line (exit 2) after the others
    are added."""
    bad = []
    for given in paths:
        if not given.exists():
            bad.append(f"{given} does not exist; pass a run directory (results/<time>-<scenario>)")
            continue
        for path in run_dirs(given):
            try:
                run, visits, effects = runrows.rows_of(path, branch)
            except ResultsError as err:
                bad.append(str(err))
                continue
            added = database.insert_run(db, run, visits, effects)
            if not quiet:
                what = "added" if added is not None else "already in the store"
                print(f"history: {what}: {path} ({run['scenario']}, commit {run['commit_id'][:12]}, "
                      f"{len(visits)} visits)", file=sys.stderr)
    for line in bad:
        print(f"run_bench.py: error: {line}", file=sys.stderr)
    return EXIT_USAGE if bad else EXIT_OK


def current_branch() -> str:
    """The branch of this checkout ("" when unknown: no git, a detached HEAD)."""
    try:
        name = subprocess.run(["git", "rev-parse", "--abbrev-ref", "HEAD"], cwd=Path(__file__).resolve().parents[2],
                              capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""
    return "" if name == "HEAD" else name


def record(store_path: Path, run_dir: Path, branch: str | None = None) -> int:
    """A finished run adds itself (--history / DLBENCH_HISTORY): 0, or 2 with one line; the run
    directory is kept either way (history add RUN_DIR adds it later)."""
    try:
        db = database.open_store(store_path)
        code = add(db, [Path(run_dir)], current_branch() if branch is None else branch)
    except ResultsError as err:
        print(f"run_bench.py: error: {err}; the run directory {run_dir} is kept: add it later with "
              f"run_bench.py history add {run_dir}", file=sys.stderr)
        return EXIT_USAGE
    print(f"history: {store_path}", file=sys.stderr)
    return code


def recorded(store: Path | None, request: BenchRequest, run: Callable[[], int]) -> int:
    """`run()` (the main run of `request`), then, with a store (--history FILE or DLBENCH_HISTORY)
    and a run that writes a run directory (rank 0, not --dry-run nor --loader-only), the run
    directory it wrote added to the store. The store opens before anything is measured (a newer or
    damaged one is one line, exit 2); a failure to add is exit 2 at worst, never 1, and the run
    directory stays."""
    if store is None or request.rank != 0 or request.dry_run or request.loader_only:
        return run()
    database.open_store(store).close()
    before = _run_dirs(request.out)
    code = run()
    made = sorted(d for d in _run_dirs(request.out) - before if (d / "cells.jsonl").is_file()
                  and rundir.read_env(d).argv == list(request.argv))  # this run's, not a neighbour's
    run_dir = request.resume or (made[-1] if made else None)
    if run_dir is None:
        return code
    added = record(store, run_dir)
    return code if added == EXIT_OK or code != EXIT_OK else added


def _run_dirs(out: Path) -> set[Path]:
    return set(out.iterdir()) if out.is_dir() else set()



def main(request: HistoryRequest, gate: Callable[[sqlite3.Connection, HistoryRequest], int] | None = None) -> int:
    """The action; `history gate` runs `gate` (the history gate,
    harness.gates.history.from_request, handed in by harness/cli/: the core imports no feature)."""
    _check(request)
    db = database.open_store(request.store, create=request.action == "add")
    action, args = request.action, request.args
    figure = request.figure or DEFAULT_FIGURE
    if action == "add":
        return add(db, [Path(a) for a in args], request.branch)
    if action == "gate":
        if gate is None:
            raise UsageError("history gate: no history gate was given (run it through run_bench.py history gate)")
        return gate(db, request)
    if action == "list":
        print(queries.list_text(db))
    elif action == "show":
        print(queries.show_text(db, args[0], request.scenario, figure))
    elif action == "compare":
        print(queries.compare_text(db, args[0], args[1], request.scenario, figure))
    elif action == "steps":
        print(queries.steps_text(db, request.scenario, figure))
    elif action == "html":
        pages = dashboard.write(db, Path(args[0]))
        print("\n".join(str(p) for p in pages))
    return EXIT_OK
