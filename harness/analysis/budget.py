"""Pure: where a time budget's next visits go (`--budget`), in whole passes over the run's cells,
and when it stops (harness.analysis.sequential: the looks, their boundaries and the response).

After each whole pass from the second on, the budget looks: each effect is decided at its first
look whose repeated interval excludes x1 or lies inside [1 / (1 + m), 1 + m], and kept. The next
pass visits every cell (the design stays balanced: each level's effect stays the average over the
other axes) while an effect is open, a look is left and the pass fits in the time left; otherwise
the run stops. Visits disturbed by outside load are kept and adjusted for (the fit's covariate);
visits under extreme load (harness.analysis.covariates.extreme) leave the fit and the passes that
follow measure their cells again. The fastest set (cells tied with the leader:
harness.analysis.ties.settled) is reported when the run ends, and never holds it: it is not an
effect and has no error rate of its own.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from harness.analysis.covariates import extreme
from harness.analysis.sequential import Rule, decide
from harness.analysis.ties import leader_and_tied, settled
from harness.results.cellresult import CellResult
from harness.results.repeats import merge_repeats

PLAIN = Rule()  # the default rule: 5% each, samples/s, no budget's plan


@dataclass(frozen=True)
class OpenQuestions:
    effects: list[str]  # "axis=level" whose decision is still open (or not yet estimable)
    tied: list[str]  # cell ids tied with the leader and not within m of it (the leader first): reported only
    looks_left: int = 0  # the looks the stopping rule still allows

    @property
    def decided(self) -> bool:
        """Every effect decided: the run stops (the fastest set does not hold it)."""
        return not self.effects


def open_questions(results: list[CellResult], cell_ids: list[str], rule: Rule = PLAIN) -> OpenQuestions:
    measured = [r for r in results if r.measured]
    d = decide(measured, cell_ids, rule)
    open_effects = [f"{x.effect.axis}={x.effect.level}" for x in d.open]
    return OpenQuestions(open_effects, unsettled_ties(measured, rule.min_effect), d.looks_left)


def unsettled_ties(measured: list[CellResult], min_effect: float) -> list[str]:
    """The leader and the cells tied with it that are neither within min_effect of it nor slower;
    []."""
    leader, tied = leader_and_tied(merge_repeats(measured))
    unsettled = [c.cell for c in tied if not settled(measured, c.cell, leader.cell, min_effect)]
    return [leader.cell] + unsettled if unsettled else []


def extreme_visits(results: list[CellResult]) -> list[str]:
    """Cells with a visit under extreme load (left out of the fit)."""
    return list(dict.fromkeys(r.cell for r in results if r.measured and extreme(r)))


def _pass_seconds(results: list[CellResult], cells: int) -> float:
    visits = [r.elapsed_s for r in results if r.elapsed_s]
    return (sum(visits) / len(visits) if visits else 0.0) * cells


def next_pass(results: list[CellResult], cell_ids: list[str], seconds_left: float,
              rule: Rule = PLAIN) -> list[int]:
    """The indices (into cell_ids) the next pass visits: every cell while an effect is open and a
    look is left; [] when every effect is decided, no look is left, or the pass does not fit."""
    questions = open_questions(results, cell_ids, rule)
    if questions.decided or not questions.looks_left:
        return []
    return list(range(len(cell_ids))) if _pass_seconds(results, len(cell_ids)) <= seconds_left else []


def ending(results: list[CellResult], cell_ids: list[str], seconds_left: float, passes: int,
           rule: Rule = PLAIN) -> str:
    """Why a budget's run ends (next_pass said []): decided, no look left, or the pass that did not
    fit; and the fastest set, reported, not waited for."""
    questions = open_questions(results, cell_ids, replace(rule, ended=True))  # as the report will say it
    min_effect = rule.min_effect
    head = f"budget: the run ends after {passes} pass(es): "
    tied = (f"; the fastest set: {len(questions.tied) - 1} cell(s) tied with the leader and not within "
            f"{min_effect:.0%} of it (reported, not waited for)" if questions.tied else
            "; the fastest set is settled")
    if questions.decided:
        return head + "every effect is decided" + tied
    stays = f"{len(questions.effects)} effect(s) stay open ({', '.join(questions.effects)})"
    if not questions.looks_left:
        return head + stays + ": the stopping rule's last look is taken (--repeats N for a longer run)" + tied
    return (head + stays + f": a pass takes about {_pass_seconds(results, len(cell_ids)):.0f} s and "
            f"{max(seconds_left, 0):.0f} s are left (a longer --budget, or a quieter machine, decides more)" + tied)
