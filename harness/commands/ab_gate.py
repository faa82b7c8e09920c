"""The A/B regression gate, for a machine that the committed baseline is not of (scripts/ci_gate.sh falls back
to it when the baseline gate exits 3): this commit's tree and its parent's, measured in one job on this machine,
single-repeat runs of the scenario interleaved parent, current, current, parent, parent, current, ... (a
balanced order: a drift of the machine during the job falls on both sides alike), each side's runs merged into
one Baseline (results.baseline.merge) and compared by ratio as the gate compares (report.compare: Mann-Whitney
and a minimum effect, on the gate metric), each cell at alpha / cells (Bonferroni, judge). Exit 1 only on a
significant regression of this commit against its parent (or when this commit's own run fails as a gate run
would: a crashed rank, a broken sampler contract); a parent that cannot run the scenario, or runs it with other
settings, gives exit 0 with the gate marked as NOT RUN in one line: never a false failure.

`precheck` is the machine half of the baseline gate's check (analysis.compare.check_machine without the probe),
made before anything runs, so that a machine of another CPU model does not spend a whole gate run on a
baseline that will be refused.

scripts/ci_gate.sh calls them through the command line: `run_bench.py gate-precheck BASELINE` and
`run_bench.py ab-gate --parent DIR ...` (harness/cli/ builds the Request).
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from harness.analysis import baselinegate
from harness.commands.compare_runs import run_as_baseline, show_comparison
from harness.results.baseline import Baseline, BaselineError, machine_of, merge
from harness.results.environment import Environment

PARENT, CURRENT = "parent", "current"


@dataclass(frozen=True)
class AbGateRequest:
    """`run_bench.py ab-gate`: this commit's tree against its parent's, interleaved on this machine."""
    parent: Path
    current: Path = Path(".")
    data_dir: Path = Path("data")
    out: Path = Path("results/ci-gate-ab")
    runs: int = 6
    scenario: str = "ci"
    min_effect: float = 0.15
    alpha: float = 0.05
    gate_metric: str = "cpu"
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
EXIT_OK, EXIT_REGRESSION, EXIT_ERROR, EXIT_BASELINE = 0, 1, 2, 3
PREFIX = "ci gate"


@dataclass(frozen=True)
class Outcome:
    """One single-repeat run of one tree: its exit code, its run directory (None when it wrote none), the last
    line it printed on stderr, and its wall time."""

    code: int
    run_dir: Path | None
    detail: str = ""
    wall_s: float = 0.0


Runner = Callable[[str, Path, Path], Outcome]  # (side, tree, out dir) -> the run's outcome


def interleaved(runs: int) -> list[str]:
    """The order of 2 x `runs` runs: parent, current, current, parent, parent, current, ... (ABBA pairs)."""
    return [side for i in range(runs) for side in ((PARENT, CURRENT) if i % 2 == 0 else (CURRENT, PARENT))]


def bench_runner(scenario: str, data_dir: Path, python: str = sys.executable, timeout_s: float = 300.0) -> Runner:
    """Runs `run_bench.py --scenario SCENARIO --repeats 1 --quiet` of a tree (its own harness first on the
    path), with the one --data-dir (a materialisation is keyed by a hash: generated once for both trees)."""

    def run(side: str, tree: Path, out: Path) -> Outcome:
        out.mkdir(parents=True, exist_ok=True)
        before = set(out.iterdir())
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tree), *filter(None, [os.environ.get(
            "PYTHONPATH")])]))
        cmd = [python, str(tree / "run_bench.py"), "--scenario", scenario, "--repeats", "1", "--quiet",
               "--data-dir", str(data_dir), "--out", str(out)]
        start = time.monotonic()
        try:
            proc = subprocess.run(cmd, cwd=tree, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                  text=True, timeout=timeout_s)
            code, err = proc.returncode, proc.stderr
        except subprocess.TimeoutExpired:
            code, err = 124, f"no end after {timeout_s:.0f} s"
        wall = time.monotonic() - start
        new = sorted(d for d in out.iterdir() if d not in before and (d / "cells.jsonl").is_file())
        lines = [ln.strip() for ln in (err or "").splitlines() if ln.strip() and not ln.startswith("results:")]
        return Outcome(code, new[-1] if new else None, lines[-1] if lines else "", wall)

    return run


def _merged(dirs: list[Path], role: str) -> Baseline:
    return merge([run_as_baseline(d, f"{role} run") for d in dirs], f"{role}'s runs")


def _not_run(why: str) -> int:
    print(f"{PREFIX}: NOT RUN: {why}; exit 0 (no verdict on this commit)", file=sys.stderr)
    return EXIT_OK


def measure(parent_root: Path, current_root: Path, out_dir: Path, runs: int, parent_label: str,
            runner: Runner) -> dict[str, list[Path]] | int:
    """The interleaved runs: each side's run directories, or the exit code when a run failed."""
    roots = {PARENT: Path(parent_root), CURRENT: Path(current_root)}
    dirs: dict[str, list[Path]] = {PARENT: [], CURRENT: []}
    order = interleaved(runs)
    for i, side in enumerate(order, 1):
        o = runner(side, roots[side], Path(out_dir) / side)
        print(f"{PREFIX} A/B: run {i}/{len(order)} {side}: exit {o.code} in {o.wall_s:.0f} s", file=sys.stderr)
        if o.code != 0 or o.run_dir is None:
            why = f"exit {o.code}" + (f": {o.detail}" if o.detail else "")
            if side == PARENT:
                return _not_run(f"the parent commit {parent_label} cannot run the scenario here ({why})")
            print(f"{PREFIX}: FAILED: this commit's run of the scenario failed ({why})", file=sys.stderr)
            return EXIT_REGRESSION if o.code == EXIT_REGRESSION else EXIT_ERROR
        dirs[side].append(o.run_dir)
    return dirs


def main(parent_root: Path, current_root: Path, data_dir: Path, out_dir: Path, runs: int = 6,
         scenario: str = "ci", min_effect: float = 0.15, alpha: float = 0.05, metric: str = "cpu",
         parent_label: str = "HEAD^", runner: Runner | None = None) -> int:
    """This commit (`current_root`) against its parent (`parent_root`): `runs` single-repeat runs each,
    interleaved, then judged (judge). Exit 0, or 1 on a significant regression (or a failed run of this commit),
    2 when this commit's runs cannot be read; 0 marked NOT RUN when the parent cannot run the scenario or runs it
    with other settings."""
    start = time.monotonic()
    runner = runner or bench_runner(scenario, Path(data_dir))
    dirs = measure(parent_root, current_root, out_dir, runs, parent_label, runner)
    if isinstance(dirs, int):
        return dirs
    return judge(dirs[PARENT], dirs[CURRENT], out_dir, min_effect, alpha, metric, parent_label,
                 time.monotonic() - start)


def judge(parent_dirs: list[Path], current_dirs: list[Path], out_dir: Path, min_effect: float = 0.15,
          alpha: float = 0.05, metric: str = "cpu", parent_label: str = "HEAD^", wall_s: float = 0.0) -> int:
    """Each side's run directories merged into one baseline and compared on `metric`, each cell at
    alpha / (cells compared) (Bonferroni: with unchanged code, the chance that any cell is called slower stays
    under `alpha`; one same-code A/B on the loaded 2-core machine called 1 of 6 cells slower at p = 0.041
    against a per-cell 0.05). The table goes to stdout and OUT_DIR/comparison.md."""
    try:
        parent = _merged(parent_dirs, "the parent")
    except BaselineError as err:
        return _not_run(f"the parent commit {parent_label}'s runs cannot be compared ({err})")
    try:
        current = _merged(current_dirs, "this commit")
    except BaselineError as err:
        print(f"{PREFIX}: error: {err}", file=sys.stderr)
        return EXIT_ERROR
    cells = max(1, len(set(parent.cells) & set(current.cells)))
    try:  # one job on one machine: the probe is the code under test here, not the machine's
        comparison = baselinegate.compare(current, parent, min_effect=min_effect, alpha=alpha / cells, metric=metric,
                                     same_machine=True)
    except BaselineError as err:
        return _not_run(f"the parent commit {parent_label} runs the scenario with other settings ({err})")
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    code = show_comparison(comparison, Path(out_dir) / "comparison.md")
    verdict = "FAILED (a significant regression against the parent)" if code else "passed"
    print(f"{PREFIX} (A/B: this commit against its parent {parent_label}, {len(current_dirs)} against "
          f"{len(parent_dirs)} single-repeat runs, interleaved on this machine, {wall_s:.0f} s; alpha {alpha:g} "
          f"over {cells} cells, {alpha / cells:.2g} each): {verdict}: {comparison.summary_line()}", file=sys.stderr)
    return code


def precheck(baseline_path: str | os.PathLike) -> int:
    """0 when the baseline may be of this machine (its CPU model, CPU count and allowed cores are this
    machine's; the probe is checked after the run), else 3 with the reason in one line (a baseline that is
    missing or unreadable included)."""
    try:
        baseline = Baseline.load(baseline_path)
        baselinegate.check_machine(machine_of(Environment.capture([], {})), None, baseline)
    except BaselineError as err:
        print(f"{PREFIX}: {err}", file=sys.stderr)
        return EXIT_BASELINE
    return EXIT_OK
