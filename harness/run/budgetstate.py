"""A budgeted run's state (`--budget`), kept in its run directory as budget.json so that fresh
ranks after a failure and a `--resume` take the budget up where it stopped: the clock spent, the
budget pass under way (its repeat number and its cells in their visiting order) and whether the
budget has ended.

Rank 0 writes it (atomically: a fresh temporary file renamed over it) when the budget decides a
pass, after each visit (the clock) and when the budget ends. The launcher reads it: the visits of a
cut pass without a line in cells.jsonl run first, then the budget goes on with the time left
(harness.run.rankloop). A run without the file (stopped before its first visit, or written by an
older harness) has spent the sum of its visits' elapsed_s and has no pass under way.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from harness import safewrite
from harness.config.launchconfig import LaunchConfig
from harness.errors import UsageError
from harness.results import rundir

FILE = "budget.json"


@dataclass(frozen=True)
class BudgetState:
    budget_s: float
    spent_s: float = 0.0  # the budget's clock when last written
    repeat: int | None = None  # the budget pass under way (its repeat number); None: the planned passes
    cells: tuple[str, ...] = ()  # the cell ids that pass visits, in its order
    ended: bool = False  # the budget decided to stop: nothing more runs


def read(run_dir: Path) -> BudgetState | None:
    """The run's budget.json (None where there is none); a damaged one is one line naming it."""
    path = Path(run_dir) / FILE
    if not path.exists():
        return None
    try:
        obj = json.loads(path.read_text())
        state = BudgetState(float(obj["budget_s"]), float(obj["spent_s"]),
                            None if obj["repeat"] is None else _count(obj["repeat"]),
                            tuple(str(c) for c in obj["cells"]), obj["ended"] is True)
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise UsageError(f"{path}: not a budget state ({type(err).__name__}: {err}); delete it (the resumed "
                         f"budget then counts the visits' time as spent) and resume again") from None
    if not (math.isfinite(state.budget_s) and math.isfinite(state.spent_s)):
        raise UsageError(f"{path}: budget_s and spent_s must be finite numbers; delete the file and resume again")
    return state


def _count(value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 10**6:
        raise ValueError(f"repeat {value!r} is not a pass number")
    return value


def write(run_dir: Path, state: BudgetState) -> None:
    """budget.json replaced atomically, never through a link planted at its name
    (harness.safewrite)."""
    safewrite.write_text(Path(run_dir) / FILE, json.dumps(asdict(state), sort_keys=True), root=run_dir)


def spent(run_dir: Path) -> float:
    """The budget's clock as the run left it: the state's, else the sum of its visits'
    elapsed_s."""
    state = read(run_dir)
    if state is not None:
        return state.spent_s
    return sum(r.elapsed_s or 0.0 for r in rundir.read_results(run_dir))


def note_spent(config: LaunchConfig, spent_s: float) -> None:
    """Rank 0 after a visit: the clock recorded (a state begun where there is none)."""
    state = read(config.run_dir) or BudgetState(config.budget_s)
    write(config.run_dir, replace(state, budget_s=config.budget_s, spent_s=round(spent_s, 3)))


def is_open(config: LaunchConfig) -> bool:
    """A budget is set and has not ended."""
    if not config.budget_s:
        return False
    state = read(config.run_dir)
    return state is None or not state.ended


def pass_left(config: LaunchConfig) -> list[tuple[int, int]]:
    """The visits (repeat, index into config.cells) of the budget pass under way that have no line
    yet, in the pass's order: a pass cut by a failure, Ctrl-C or a kill."""
    state = read(config.run_dir) if config.budget_s else None
    if state is None or state.repeat is None or state.ended:
        return []
    index = {c.id: i for i, c in enumerate(config.cells)}
    done = {(r.cell, r.repeat) for r in rundir.read_results(config.run_dir)}
    return [(state.repeat, index[c]) for c in state.cells if c in index and (c, state.repeat) not in done]
