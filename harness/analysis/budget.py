"""Pure: where a time budget's next visits go (`--budget`), in whole passes over the run's cells.

After the planned passes, another pass is worth its time while the answer is still open:
- an effect is open while its decision is (harness.analysis.effects.Effect.decision with the minimum effect
  m): its interval neither excludes x1 nor lies inside [1 / (1 + m), 1 + m]; a level not yet estimable is open;
- the fastest set is open while a cell tied with the leader is neither within m of it nor decidedly slower,
  by their ratio paired by pass (harness.analysis.intervals.settled).
Either way the next pass visits every cell, so the design stays balanced: each level's effect stays the
average over the other axes (a pass of the leader's cells alone would pull an axis's effect toward its value
there). Visits disturbed by outside load (figures.other_cpu_pct above harness.measure.hostload.OUTSIDE_LOAD_PCT)
are owed a redo each: when nothing else is open, a pass of the owed cells alone, whose visits take the
disturbed ones' places in the fit (harness.analysis.effects.observations).
Nothing open and nothing owed: the run is decided and stops early. A pass that would not fit in the time left
is not started.
"""
from __future__ import annotations

from dataclasses import dataclass

from harness.analysis.effects import (
    MIN_EFFECT,
    OPEN,
    disturbed,
    fit_effects,
    level_order,
    observations,
    whole_passes,
)
from harness.analysis.intervals import leader_and_tied, settled
from harness.results.cellresult import CellResult
from harness.results.repeats import merge_repeats


@dataclass(frozen=True)
class OpenQuestions:
    effects: list[str]  # "axis=level" whose decision is still open (or not yet estimable)
    tied: list[str]  # cell ids tied with the leader and not within m of it (the leader first), when any

    @property
    def decided(self) -> bool:
        return not self.effects and not self.tied


def open_questions(results: list[CellResult], cell_ids: list[str],
                   min_effect: float = MIN_EFFECT) -> OpenQuestions:
    measured = [r for r in results if r.measured]
    order = level_order(measured, cell_ids)
    fitted = fit_effects(observations(measured, "throughput"), order, interactions=False)
    fitted_levels = {(e.axis, e.level) for e in fitted}
    passes = whole_passes(measured)
    open_effects = [f"{e.axis}={e.level}" for e in fitted if e.decision(min_effect, passes) == OPEN]
    open_effects += [f"{a}={lv}" for a, levels in order.items() for lv in levels[1:]
                     if (a, lv) not in fitted_levels]  # not estimable yet: too few visits
    leader, tied = leader_and_tied(merge_repeats(measured))
    unsettled = [c.cell for c in tied if not settled(measured, c.cell, leader.cell, min_effect)]
    return OpenQuestions(open_effects, [leader.cell] + unsettled if unsettled else [])


def owed_visits(results: list[CellResult]) -> list[str]:
    """Cells with more visits disturbed by outside load than undisturbed visits after them."""
    owed: dict[str, int] = {}
    for r in sorted(results, key=lambda r: r.repeat):
        if disturbed(r):
            owed[r.cell] = owed.get(r.cell, 0) + 1
        elif owed.get(r.cell):
            owed[r.cell] -= 1
    return [c for c, n in owed.items() if n > 0]


def next_pass(results: list[CellResult], cell_ids: list[str], seconds_left: float,
              min_effect: float = MIN_EFFECT) -> list[int]:
    """The indices (into cell_ids) the next pass visits: every cell while something is open, else the cells
    owed a redo; [] when the answer is decided and nothing is owed, or no pass fits."""
    questions = open_questions(results, cell_ids, min_effect)
    redo = [c for c in owed_visits(results) if c in cell_ids]
    if questions.decided and not redo:
        return []
    wanted = redo if questions.decided else cell_ids
    todo = sorted(cell_ids.index(c) for c in wanted)
    visits = [r.elapsed_s for r in results if r.elapsed_s]
    per_visit = sum(visits) / len(visits) if visits else 0.0
    return todo if per_visit * len(todo) <= seconds_left else []


def ending(results: list[CellResult], cell_ids: list[str], seconds_left: float, passes: int,
           min_effect: float = MIN_EFFECT) -> str:
    """Why a budget's run ends (next_pass said []): decided, or what stays open and the pass that did not fit."""
    questions = open_questions(results, cell_ids, min_effect)
    head = f"budget: the run ends after {passes} pass(es): "
    if questions.decided and not [c for c in owed_visits(results) if c in cell_ids]:
        return head + "every effect is decided and the fastest set settled"
    visits = [r.elapsed_s for r in results if r.elapsed_s]
    needed = (sum(visits) / len(visits) if visits else 0.0) * len(cell_ids)
    what = []
    if questions.effects:
        what.append(f"{len(questions.effects)} effect(s) open ({', '.join(questions.effects)})")
    if questions.tied:
        what.append(f"{len(questions.tied) - 1} cell(s) tied with the leader and not within {min_effect:.0%} of it")
    return (head + ("; ".join(what) or "visits disturbed by outside load are owed a redo")
            + f" stay open: a pass takes about {needed:.0f} s and {max(seconds_left, 0):.0f} s are left "
            "(a longer --budget, or a quieter machine, decides more)")
