"""The baseline gate around the main run (`--baseline FILE`, `--save-baseline FILE`): harness/cli/
hands one to harness.commands.bench when the request asks for it (the core imports no feature).
Before anything runs the baseline is loaded and checked (its settings, then the machine; the probe
is checked after the run); after the report the run is saved as a baseline and/or compared with it,
its table printed and written to RUN_DIR/comparison.md."""
from __future__ import annotations

import sys
from pathlib import Path

from harness.config.request import GateOptions
from harness.errors import EXIT_OK
from harness.gates import baseline as baseline_gate
from harness.gates import table
from harness.gates.inputs import run_as_baseline
from harness.results.baselinefile import Baseline, machine_of
from harness.results.environment import Environment


class BaselineRunGate:
    """The gate of one main run (harness.commands.bench.RunGate): `check` before, `apply` after."""

    def __init__(self, options: GateOptions):
        self.options = options
        self.baseline: Baseline | None = None

    def check(self, scenario_name: str, comparable: dict) -> None:
        if self.options.baseline:
            self.baseline = Baseline.load(self.options.baseline)
            baseline_gate.check_comparable(scenario_name, comparable, self.baseline)
            baseline_gate.check_machine(machine_of(Environment.capture([], {})), None, self.baseline)

    def apply(self, run_dir: Path) -> int:
        gate = self.options
        current = run_as_baseline(run_dir)
        if gate.save_baseline:
            current.save(gate.save_baseline)
            print(f"baseline written: {gate.save_baseline}", file=sys.stderr)
        if self.baseline is None:
            return EXIT_OK
        return table.show(baseline_gate.judge(current, self.baseline, gate.raw, gate.min_effect, gate.alpha,
                                              gate.strict, gate.metric), run_dir / "comparison.md")


def of(options: GateOptions) -> BaselineRunGate | None:
    """The gate a run's options ask for, or None (neither --baseline nor --save-baseline)."""
    return BaselineRunGate(options) if options.baseline or options.save_baseline else None
