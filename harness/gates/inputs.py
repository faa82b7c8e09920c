"""What the gates judge, read from run directories: one run directory as a Baseline
(`run_as_baseline`, a one-line BaselineError, exit 3, when it is missing, incomplete or
unreadable), and several runs of one tree merged into one Baseline (`merged`, the A/B gate's side:
harness.results.baselinefile.merge)."""
from __future__ import annotations

from pathlib import Path

from harness.results import rundir
from harness.results.baselinefile import Baseline, BaselineError, merge

RUN_FILES = ("env.json", "probe.jsonl", "cells.jsonl")


def run_as_baseline(run_dir: Path, role: str = "run") -> Baseline:
    """A run directory as a Baseline; a one-line BaselineError (exit 3) when it is missing,
    incomplete (no env.json, probe.jsonl or cells.jsonl) or unreadable."""
    where = f"{role} {run_dir}"
    if not Path(run_dir).is_dir():
        raise BaselineError(f"{where} is not a directory; pass a run directory under results/")
    missing = [name for name in RUN_FILES if not (Path(run_dir) / name).is_file()]
    if missing:
        raise BaselineError(f"{where} is incomplete (no {', '.join(missing)}); pass a finished run "
                            f"directory under results/")
    try:
        env, cells = rundir.read_env(run_dir), rundir.read_visits(run_dir)
        if not cells:
            raise ValueError(f"{run_dir}/cells.jsonl is empty")
        lacking = [k for k in ("comparable", "scenario") if getattr(env, k) is None]
        if lacking:
            raise ValueError(f"{run_dir}/env.json lacks {', '.join(lacking)} (written by an older harness?)")
        return Baseline.from_run(cells, env, rundir.read_probe(run_dir), env.comparable, env.scenario)
    except ValueError as err:  # rundir.ResultsError included
        raise BaselineError(f"{where} cannot be compared: {err}") from None


def merged(dirs: list[Path], role: str) -> Baseline:
    """The run directories of one side (`role`: "the parent", "this commit") as one Baseline, their
    repeats in the order given."""
    return merge([run_as_baseline(d, f"{role} run") for d in dirs], f"{role}'s runs")
