"""The A/B gate's runs (harness.gates.ab_command; harness.gates.ab judges them): this commit's tree
and its parent's, single-repeat runs of a scenario interleaved parent, current, current, parent,
parent, current, ... (a balanced order: a drift of the machine during the job falls on both sides
alike), each run a `run_bench.py` process of its own tree. The runs stop at the first that
fails."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

PARENT, CURRENT = "parent", "current"
PREFIX = "ci gate"  # the lines the gate prints begin so


@dataclass(frozen=True)
class Outcome:
    """One single-repeat run of one tree: its exit code, its run directory (None when it wrote
    none), the last line it printed on stderr, and its wall time."""

    code: int
    run_dir: Path | None
    detail: str = ""
    wall_s: float = 0.0


Runner = Callable[[str, Path, Path], Outcome]  # (side, tree, out dir) -> the run's outcome


@dataclass(frozen=True)
class AbRuns:
    """Each side's run directories, in the order run; `failed`: the side and outcome of the run
    that ended them early (None: every run finished)."""

    dirs: dict[str, list[Path]] = field(default_factory=lambda: {PARENT: [], CURRENT: []})
    failed: tuple[str, Outcome] | None = None


def interleaved(runs: int) -> list[str]:
    """The order of 2 x `runs` runs: parent, current, current, parent, parent, current, ... (ABBA
    pairs)."""
    return [side for i in range(runs) for side in ((PARENT, CURRENT) if i % 2 == 0 else (CURRENT, PARENT))]


def bench_runner(scenario: str, data_dir: Path, python: str = sys.executable, timeout_s: float = 300.0) -> Runner:
    """Runs `run_bench.py --scenario SCENARIO --repeats 1 --quiet` of a tree (its own harness first
    on the path), with the one --data-dir (a materialisation is keyed by a hash: generated once for
    both trees)."""

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
        return outcome(code, err, out, before, wall)

    return run


def outcome(code: int, stderr: str | None, out: Path, before: set[Path], wall_s: float) -> Outcome:
    """A finished run's Outcome: the newest run directory under `out` not in `before` that has a
    cells.jsonl, and the last line of stderr that is not the "results:" line."""
    new = sorted(d for d in out.iterdir() if d not in before and (d / "cells.jsonl").is_file())
    lines = [ln.strip() for ln in (stderr or "").splitlines() if ln.strip() and not ln.startswith("results:")]
    return Outcome(code, new[-1] if new else None, lines[-1] if lines else "", wall_s)


def measure(parent_root: Path, current_root: Path, out_dir: Path, runs: int, runner: Runner) -> AbRuns:
    """The interleaved runs, each under OUT_DIR/<side>, one progress line each on stderr; the first
    that fails (an exit code, or no run directory) ends them."""
    roots = {PARENT: Path(parent_root), CURRENT: Path(current_root)}
    done = AbRuns()
    order = interleaved(runs)
    for i, side in enumerate(order, 1):
        o = runner(side, roots[side], Path(out_dir) / side)
        print(f"{PREFIX} A/B: run {i}/{len(order)} {side}: exit {o.code} in {o.wall_s:.0f} s", file=sys.stderr)
        if o.code != 0 or o.run_dir is None:
            return AbRuns(done.dirs, (side, o))
        done.dirs[side].append(o.run_dir)
    return done
