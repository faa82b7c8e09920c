"""The A/B gate's judgement (harness.commands.ab_gate prints it; harness.run.abruns measures the runs): each
side's single-repeat run directories merged into one Baseline (harness.analysis.gateinput.merged) and compared
on the gate metric as the baseline gate compares (harness.analysis.baselinegate.compare: Mann-Whitney and a
minimum effect), each cell at alpha / (cells compared) (Bonferroni: with unchanged code, the chance that any
cell is called slower stays under `alpha`; one same-code A/B on the loaded 2-core machine called 1 of 6 cells
slower at p = 0.041 against a per-cell 0.05). The two sides are one job on one machine: the probe is the code
under test there, not the machine's, so it is not checked.

No verdict on this commit (NOT RUN, exit 0) when the parent's runs cannot be read or the parent runs the
scenario with other settings; exit 2 when this commit's own runs cannot be read."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness.analysis import baselinegate
from harness.analysis.gateinput import merged
from harness.errors import EXIT_OK, EXIT_USAGE
from harness.results.baseline import BaselineError


@dataclass(frozen=True)
class AbJudgement:
    """The comparison of this commit's runs against its parent's (None: no verdict), the cells it tested,
    and why there is no verdict: `not_run` (the parent's side; exit 0) or `error` (this commit's; exit 2)."""

    comparison: baselinegate.Comparison | None = None
    cells: int = 0
    not_run: str = ""
    error: str = ""

    @property
    def exit_code(self) -> int:
        if self.error:
            return EXIT_USAGE
        return EXIT_OK if self.comparison is None else self.comparison.exit_code


def judge(parent_dirs: list[Path], current_dirs: list[Path], min_effect: float = 0.15, alpha: float = 0.05,
          metric: str = "cpu", parent_label: str = "HEAD^") -> AbJudgement:
    """This commit's runs (`current_dirs`) against its parent's, each cell at alpha / (cells compared)."""
    try:
        parent = merged(parent_dirs, "the parent")
    except BaselineError as err:
        return AbJudgement(not_run=f"the parent commit {parent_label}'s runs cannot be compared ({err})")
    try:
        current = merged(current_dirs, "this commit")
    except BaselineError as err:
        return AbJudgement(error=str(err))
    cells = max(1, len(set(parent.cells) & set(current.cells)))
    try:  # one job on one machine: the probe is the code under test here, not the machine's
        comparison = baselinegate.compare(current, parent, min_effect=min_effect, alpha=alpha / cells,
                                          metric=metric, same_machine=True)
    except BaselineError as err:
        return AbJudgement(not_run=f"the parent commit {parent_label} runs the scenario with other settings ({err})")
    return AbJudgement(comparison, cells)
