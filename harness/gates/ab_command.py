"""`run_bench.py ab-gate` and `run_bench.py gate-precheck`: the A/B regression gate, for a machine
that the committed baseline is not of (scripts/ci_gate.sh falls back to it when the baseline gate
exits 3): this commit's tree and its parent's, measured in one job on this machine
(harness.gates.trees: single-repeat runs interleaved in pairs), judged on the paired log ratios
(harness.gates.ab: an exact sign-flip test over the pairs, alpha over all cells together). Exit 1
only on a significant regression of this commit against its parent (or when this commit's own run
fails as a gate run would: a crashed rank, a broken sampler contract); a parent that cannot run the
scenario, or runs it with other settings, gives exit 5 (EXIT_NOT_RUN) with the gate marked as NOT
RUN in one line: never a false failure, never a false pass.

`precheck` is the machine half of the baseline gate's check (analysis.baseline_gate.check_machine
without the probe), made before anything runs, so that a machine of another CPU model does not
spend a whole gate run on a baseline that will be refused.

scripts/ci_gate.sh calls them through the command line: `run_bench.py gate-precheck BASELINE` and
`run_bench.py ab-gate --parent DIR ...` (harness/cli/ builds the Request).
"""
from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from harness.errors import EXIT_BASELINE, EXIT_NOT_RUN, EXIT_OK, EXIT_REGRESSION, EXIT_USAGE
from harness.gates import ab, table, trees
from harness.gates import baseline as baseline_gate
from harness.gates.trees import PARENT, PREFIX, Runner
from harness.results.baselinefile import Baseline, BaselineError, machine_of
from harness.results.environment import Environment


@dataclass(frozen=True)
class AbGateRequest:
    """`run_bench.py ab-gate`: this commit's tree against its parent's, interleaved on this
    machine."""
    parent: Path
    current: Path = Path(".")
    data_dir: Path = Path("data")
    out: Path = Path("results/ci-gate-ab")
    runs: int = 6
    scenario: str = "ci"
    min_effect: float = 0.15
    alpha: float = 0.05
    gate_metric: str = "figures"
    parent_label: str = "HEAD^"


@dataclass(frozen=True)
class GatePrecheckRequest:
    """`run_bench.py gate-precheck BASELINE`: may the baseline be of this machine?"""
    baseline: Path


def precheck_request(request: GatePrecheckRequest) -> int:
    """`run_bench.py gate-precheck` (harness/cli/)."""
    return precheck(request.baseline)


def ab_gate_request(request: AbGateRequest) -> int:
    """`run_bench.py ab-gate` (harness/cli/)."""
    r = request
    return main(r.parent, r.current, r.data_dir, r.out, runs=r.runs, scenario=r.scenario, min_effect=r.min_effect,
                alpha=r.alpha, metric=r.gate_metric, parent_label=r.parent_label)


def _not_run(why: str) -> int:
    print(f"{PREFIX}: NOT RUN: {why}; exit {EXIT_NOT_RUN} (no verdict on this commit)", file=sys.stderr)
    return EXIT_NOT_RUN


def _failed(side: str, o: trees.Outcome, parent_label: str) -> int:
    """The exit code of a run that ended the runs early, with its one line."""
    why = f"exit {o.code}" + (f": {o.detail}" if o.detail else "")
    if side == PARENT:
        return _not_run(f"the parent commit {parent_label} cannot run the scenario here ({why})")
    print(f"{PREFIX}: FAILED: this commit's run of the scenario failed ({why})", file=sys.stderr)
    return EXIT_REGRESSION if o.code == EXIT_REGRESSION else EXIT_USAGE


def main(parent_root: Path, current_root: Path, data_dir: Path, out_dir: Path, runs: int = 6,
         scenario: str = "ci", min_effect: float = 0.15, alpha: float = 0.05, metric: str = "figures",
         parent_label: str = "HEAD^", runner: Runner | None = None) -> int:
    """This commit (`current_root`) against its parent (`parent_root`): `runs` single-repeat runs
    each, interleaved, then judged (judge). Exit 0, or 1 on a significant regression (or a failed
    run of this commit), 2 when this commit's runs cannot be read; 5 (EXIT_NOT_RUN) marked NOT RUN
    when the parent cannot run the scenario or runs it with other settings."""
    start = time.monotonic()
    runner = runner or trees.bench_runner(scenario, Path(data_dir))
    done = trees.measure(parent_root, current_root, out_dir, runs, runner)
    if done.failed is not None:
        return _failed(*done.failed, parent_label)
    return judge(done.dirs[PARENT], done.dirs[trees.CURRENT], out_dir, min_effect, alpha, metric, parent_label,
                 time.monotonic() - start)


def judge(parent_dirs: list[Path], current_dirs: list[Path], out_dir: Path, min_effect: float = 0.15,
          alpha: float = 0.05, metric: str = "figures", parent_label: str = "HEAD^", wall_s: float = 0.0) -> int:
    """The judgement (harness.gates.ab) printed: the table to stdout and OUT_DIR/comparison.md,
    the verdict in one line on stderr."""
    j = ab.judge(parent_dirs, current_dirs, min_effect, alpha, metric, parent_label)
    if j.error:
        print(f"{PREFIX}: error: {j.error}", file=sys.stderr)
        return j.exit_code
    if j.verdict is None:
        return _not_run(j.not_run)
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    code = table.show(j.verdict, Path(out_dir) / "comparison.md")
    verdict = "FAILED (a significant regression against the parent)" if code else "passed"
    lines = j.verdict.summary_lines()
    per_figure = "" if len(lines) == 1 else f" and {len(lines)} figures"
    print(f"{PREFIX} (A/B: this commit against its parent {parent_label}, {len(current_dirs)} against "
          f"{len(parent_dirs)} single-repeat runs in {j.pairs} interleaved pairs on this machine, {wall_s:.0f} s; "
          f"{ab.TEST_NAME}, alpha {alpha:g} over the {j.cells} cells{per_figure} together): {verdict}: "
          + ("; ".join(lines) if len(lines) == 1 else "\n  " + "\n  ".join(lines)), file=sys.stderr)
    return code


def precheck(baseline_path: str | os.PathLike) -> int:
    """0 when the baseline may be of this machine (its CPU model, CPU count and allowed cores are
    this machine's; the probe is checked after the run), else 3 with the reason in one line (a
    baseline that is missing or unreadable included)."""
    try:
        baseline = Baseline.load(baseline_path)
        baseline_gate.check_machine(machine_of(Environment.capture([], {})), None, baseline)
    except BaselineError as err:
        print(f"{PREFIX}: {err}", file=sys.stderr)
        return EXIT_BASELINE
    return EXIT_OK
