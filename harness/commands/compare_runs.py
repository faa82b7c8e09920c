"""`run_bench.py compare RUN_A RUN_B`: run B against run A, cell by cell, as the CI gate compares a run with
a baseline."""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from harness.analysis import baselinegate
from harness.report.gatetable import render as render_comparison
from harness.results import rundir
from harness.results.baseline import Baseline, BaselineError

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
        env, cells = rundir.read_env(run_dir), rundir.read_results(run_dir)
        if not cells:
            raise ValueError(f"{run_dir}/cells.jsonl is empty")
        lacking = [k for k in ("comparable", "scenario") if getattr(env, k) is None]
        if lacking:
            raise ValueError(f"{run_dir}/env.json lacks {', '.join(lacking)} (written by an older harness?)")
        return Baseline.from_run(cells, env, rundir.read_probe(run_dir), env.comparable, env.scenario)
    except ValueError as err:  # rundir.ResultsError included
        raise BaselineError(f"{where} cannot be compared: {err}") from None


def show_comparison(comparison: baselinegate.Comparison, markdown_path: Path | None) -> int:
    print("\n" + render_comparison(comparison, "text"))
    for warning in comparison.warnings:
        print(f"WARNING: {warning}", file=sys.stderr)
    if markdown_path is not None:
        markdown_path.write_text(render_comparison(comparison, "markdown") + "\n")
    return comparison.exit_code


@dataclass(frozen=True)
class CompareRequest:
    """`run_bench.py compare RUN_A RUN_B`: B against A, on the gate's terms."""
    run_a: Path
    run_b: Path
    markdown: bool = False
    gate_metric: str = "throughput"
    raw: bool = False
    min_effect: float = 0.05
    alpha: float = 0.05
    strict: bool = False


def main(request: CompareRequest) -> int:
    r = request
    baseline = run_as_baseline(r.run_a, "run A (the baseline)")
    current = run_as_baseline(r.run_b, "run B")
    comparison = baselinegate.compare(current, baseline, r.raw, r.min_effect, r.alpha, r.strict, r.gate_metric)
    if r.markdown:
        print(render_comparison(comparison, "markdown"))
        return comparison.exit_code
    return show_comparison(comparison, None)
