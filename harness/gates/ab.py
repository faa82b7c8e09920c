"""The A/B gate's judgement (harness.gates.ab_command prints it; harness.gates.trees measures the
runs): the parent's and this commit's single-repeat runs, paired as they ran, tested cell by cell
on the paired log ratios by an exact sign-flip test whose statistic is the largest over the cells.

Pairs. The runs alternate in pairs, parent/current then current/parent (trees.interleaved), so the
k-th run of the parent and the k-th of this commit ran next to each other and share the machine's
state of that minute: the load of other processes moves a whole run's CPU per sample by tens of
percent (docs/ci-gate.md), and it moves both runs of a pair alike. The unit of the test is
therefore the pair: d[k, c] = log(this commit's figure / the parent's) of cell c in pair k, a ratio
in which the pair's shared load cancels.

The test. With unchanged code the two runs of a pair are exchangeable: each pair's log ratios may
have either sign, all cells of a pair flipping together (a flip swaps the pair's two runs). Each
cell's statistic is S_c(s) = sum_k s_k d[k, c] / sqrt(sum_k d[k, c]^2) for a sign pattern s (the
denominator does not change under a flip: S_c is the cell's own sum, scaled so that cells of
unequal noise weigh alike, and one pair's outlier cannot carry it); M(s) = max over cells of
S_c(s). A cell's p-value is the share of the 2^n sign patterns whose M reaches |S_c| of the
observed pattern (all +1), in the direction the cell moved: the single-step max-statistic
permutation test, exact, and it holds the chance that any cell of unchanged code is called slower
to alpha over all cells together, whatever their correlation (a run's load moves all of its cells
alike, which a Bonferroni split of alpha ignores and pays for in power). n pairs can reach p = 1 /
2^n: 5 pairs 0.031, 6 pairs 0.016; below 5 pairs no cell can be called at alpha 0.05
(inconclusive). Beyond EXACT_PAIRS pairs, SAMPLED_PATTERNS seeded random patterns and the observed
one stand in for all of them.

A cell is "slower" when p < alpha and the geometric mean of its paired ratios has risen by at least
the minimum effect (for throughput, fallen). With the gate's figures (metric "figures") each figure
is tested so, alone, at its own minimum effect (harness.gates.baseline.FIGURES) and at alpha / 3,
so that alpha holds for the figures and cells together (6 pairs reach p = 1/64 = 0.016, below 0.05
/ 3). The two sides are one job on one machine: the probe is the code under test there, not the
machine's, so it is not checked. Cells that cannot be paired (errored, missing, other parameters, a
run without the figure) are judged as the baseline gate judges them
(harness.gates.baseline.compare_cell).

No verdict on this commit (NOT RUN, exit 0) when the parent's runs cannot be read or the parent
runs the scenario with other settings; exit 2 when this commit's own runs cannot be read or the two
sides have different numbers of runs."""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from harness.errors import EXIT_OK, EXIT_USAGE
from harness.gates import baseline as baseline_gate
from harness.gates.inputs import merged
from harness.results import stats
from harness.results.baselinefile import Baseline, BaselineError

EXACT_PAIRS = 16  # up to this many pairs every sign pattern is enumerated (65,536 at 16)
SAMPLED_PATTERNS = 65_535  # beyond it: this many seeded random patterns, plus the observed one
TEST_NAME = "paired sign-flip test, max over cells"


@dataclass(frozen=True)
class AbJudgement:
    """The verdict on this commit's runs against its parent's (None: no verdict), the cells it
    tested, the pairs, and why there is no verdict: `not_run` (the parent's side; exit 0) or
    `error` (this commit's; exit 2)."""

    verdict: baseline_gate.Verdict | None = None
    cells: int = 0
    not_run: str = ""
    error: str = ""
    pairs: int = 0

    @property
    def exit_code(self) -> int:
        if self.error:
            return EXIT_USAGE
        return EXIT_OK if self.verdict is None else self.verdict.exit_code


def sign_patterns(n: int, seed: int = 0) -> np.ndarray:
    """The sign patterns over n pairs, one a row: all 2^n of them up to EXACT_PAIRS pairs (the
    observed one, all +1, first), else the observed one and SAMPLED_PATTERNS seeded random ones."""
    if n <= EXACT_PAIRS:
        bits = (np.arange(2 ** n)[:, None] >> np.arange(n)[None, :]) & 1
        return 1 - 2 * bits
    rng = np.random.default_rng(seed)
    return np.vstack([np.ones((1, n), dtype=int), rng.choice([-1, 1], size=(SAMPLED_PATTERNS, n))])


def sign_flip_p(d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """d: log ratios, one row a pair, one column a cell. Per cell: the observed statistic S_c and
    its p-value (the share of sign patterns whose max over cells reaches |S_c|)."""
    d = np.asarray(d, dtype=float)
    scale = np.sqrt((d ** 2).sum(axis=0))
    scale[scale == 0] = np.inf  # a cell with no change at all: S_c = 0 under every pattern
    s = sign_patterns(d.shape[0]) @ d / scale  # patterns x cells
    observed, most = s[0], s.max(axis=1)
    tol = 1e-9 * np.maximum(1.0, np.abs(observed))
    p = np.array([np.count_nonzero(most >= abs(x) - t) for x, t in zip(observed, tol)]) / len(s)
    return observed, p


def pairable(parent: Baseline, current: Baseline, key: str, n: int) -> list[str]:
    """The cells both sides measured in every one of the n pairs, without error, with the same
    parameters."""
    both = [c for c in parent.cells if c in current.cells]
    return [c for c in both if not parent.cells[c].error and not current.cells[c].error
            and baseline_gate.params_differ(current.cells[c], parent.cells[c]) is None
            and len(parent.cells[c].samples(key)) == n == len(current.cells[c].samples(key))
            and min(parent.cells[c].samples(key) + current.cells[c].samples(key)) > 0]


def paired_rows(parent: Baseline, current: Baseline, key: str, n: int, min_effect: float,
                alpha: float) -> dict[str, baseline_gate.Row]:
    """The pairable cells' rows: the parent's and this commit's medians, the geometric mean of the
    paired ratios, the sign-flip p-value and the verdict."""
    cells = pairable(parent, current, key, n)
    if not cells:
        return {}
    d = np.array([[math.log(current.cells[c].samples(key)[k] / parent.cells[c].samples(key)[k]) for c in cells]
                  for k in range(n)])
    observed, p = sign_flip_p(d)
    lower = key in baseline_gate.LOWER_IS_BETTER
    rows = {}
    for j, c in enumerate(cells):
        a, b = current.cells[c].samples(key), parent.cells[c].samples(key)
        ratio = math.exp(d[:, j].mean())
        if 2.0 ** -n >= alpha:
            rows[c] = baseline_gate.Row(c, stats.median(b), stats.median(a), ratio, None, "inconclusive",
                                       f"{n} pairs: a sign-flip test cannot reach p<{alpha:.3g}")
            continue
        significant = p[j] < alpha and abs(ratio - 1) >= min_effect
        note = "" if significant else ("below min effect" if p[j] < alpha else "not significant")
        better = ratio < 1 if lower else ratio > 1
        verdict = ("faster" if better else "slower") if significant else "unchanged"
        rows[c] = baseline_gate.Row(c, stats.median(b), stats.median(a), ratio, float(p[j]), verdict, note,
                                   regression=verdict == "slower")
    return rows


def judge(parent_dirs: list[Path], current_dirs: list[Path], min_effect: float = 0.15, alpha: float = 0.05,
          metric: str = "figures", parent_label: str = "HEAD^") -> AbJudgement:
    """This commit's runs (`current_dirs`) against its parent's, the k-th of each a pair, alpha
    over all cells."""
    try:
        parent = merged(parent_dirs, "the parent")
    except BaselineError as err:
        return AbJudgement(not_run=f"the parent commit {parent_label}'s runs cannot be compared ({err})")
    try:
        current = merged(current_dirs, "this commit")
    except BaselineError as err:
        return AbJudgement(error=str(err))
    try:
        baseline_gate.check_comparable(current.scenario, current.comparable, parent)
    except BaselineError as err:
        return AbJudgement(not_run=f"the parent commit {parent_label} runs the scenario with other settings ({err})")
    n = len(current_dirs)
    if len(parent_dirs) != n:
        return AbJudgement(error=f"{len(parent_dirs)} runs of the parent against {n} of this commit: the paired "
                                 f"test needs one of each per pair")
    cells = max(1, len(set(parent.cells) & set(current.cells)))
    # one job on one machine: the probe is the code under test here, not the machine's (same_machine)
    verdict = baseline_gate.judge(current, parent, min_effect=min_effect, alpha=alpha, metric=metric,
                                 same_machine=True,
                                 tested=lambda key, effect, each: paired_rows(parent, current, key, n, effect, each))
    return AbJudgement(verdict, cells, pairs=n)
