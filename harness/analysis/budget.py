"""Pure: where a time budget's next visits go (`--budget`), a racing design over the run's cells.

After the planned passes, another pass is worth its time while the answer is still open:
- an effect is open while its interval straddles the minimum effect (it contains x(1 + m) or x(1 - m)): the
  data cannot yet say whether the choice matters. Effects are fitted from every cell, so the next pass visits
  every cell;
- otherwise, cells tied with the leader (their throughput interval overlaps the leader's) are open: the next
  pass visits the leader and them.
Visits disturbed by outside load (figures.other_cpu_pct above harness.measure.hostload.OUTSIDE_LOAD_PCT) are
owed a visit each: their cells join the next pass even when nothing else is open.
Nothing open: the run is decided and stops early. A pass that would not fit in the time left is not started.
"""
from __future__ import annotations

from dataclasses import dataclass

from harness.analysis.effects import disturbed, fit_effects, level_order, observations
from harness.analysis.intervals import leader_and_tied
from harness.results.cellresult import CellResult, merge_repeats


@dataclass(frozen=True)
class OpenQuestions:
    effects: list[str]  # "axis=level" whose interval straddles the minimum effect
    tied: list[str]  # cell ids tied with the leader (the leader included), when more than one

    @property
    def decided(self) -> bool:
        return not self.effects and not self.tied


def open_questions(results: list[CellResult], cell_ids: list[str], min_effect: float = 0.05) -> OpenQuestions:
    measured = [r for r in results if r.measured]
    order = level_order(measured, cell_ids)
    fitted = fit_effects(observations(measured, "throughput"), order, interactions=False)
    fitted_levels = {(e.axis, e.level) for e in fitted}
    open_effects = [f"{e.axis}={e.level}" for e in fitted if e.level != e.reference
                    and any(e.low < edge < e.high for edge in (1 + min_effect, 1 - min_effect))]
    open_effects += [f"{a}={lv}" for a, levels in order.items() for lv in levels[1:]
                     if (a, lv) not in fitted_levels]  # not estimable yet: too few visits
    leader, tied = leader_and_tied(merge_repeats(measured))
    return OpenQuestions(open_effects, [leader.cell] + [c.cell for c in tied] if tied else [])


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
              min_effect: float = 0.05) -> list[int]:
    """The indices (into cell_ids) the next pass visits; [] when the answer is decided (and no disturbed
    visit is owed) or no pass fits."""
    questions = open_questions(results, cell_ids, min_effect)
    redo = [c for c in owed_visits(results) if c in cell_ids]
    if questions.decided and not redo:
        return []
    wanted = cell_ids if questions.effects else list(dict.fromkeys(questions.tied + redo))
    todo = sorted(cell_ids.index(c) for c in wanted if c in cell_ids)
    visits = [r.elapsed_s for r in results if r.elapsed_s]
    per_visit = sum(visits) / len(visits) if visits else 0.0
    return todo if per_visit * len(todo) <= seconds_left else []
