"""`run_bench.py compare RUN_A RUN_B`: run B against run A, cell by cell, as the CI gate compares a
run with a baseline (each run directory read as a Baseline: harness.gates.inputs)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness.gates import baseline as baseline_gate
from harness.gates import table
from harness.gates.inputs import run_as_baseline


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
    verdict = baseline_gate.judge(current, baseline, r.raw, r.min_effect, r.alpha, r.strict, r.gate_metric)
    if r.markdown:
        print(table.render_verdict(verdict, "markdown"))
        return verdict.exit_code
    return table.show(verdict, None)

