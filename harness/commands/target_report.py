"""The per-stage table, plots/stages.png and, with a target, each cell's prediction there and the
configuration to use, from a run directory alone (harness.report.stagetable):

    python run_bench.py target-report RUN_DIR [--target FILE]

Without --target the scenario's [target] table is used when it has one (the run's env.json names
the scenario)."""
from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from harness import safewrite
from harness.config import scenario as scenario_mod
from harness.config import target as target_mod
from harness.errors import EXIT_OK, EXIT_USAGE, UsageError
from harness.report import stagetable
from harness.report.tables import render_tables
from harness.results import rundir


@dataclass(frozen=True)
class TargetReportRequest:
    """`run_bench.py target-report RUN_DIR [--target FILE]`."""

    run_dir: Path
    target: Path | None = None  # a TOML file with a [target] table (default: the scenario's, if any)


Request = TargetReportRequest  # what harness.cli builds


def run(run_dir: Path, target_file: Path | None = None) -> str:
    results = rundir.read_visits(run_dir)
    if not results:
        raise UsageError(f"{run_dir}: no cells.jsonl lines to report; give a run directory")
    name = getattr(rundir.read_env(run_dir), "scenario", None) or results[0].scenario
    try:
        sc = scenario_mod.load_shipped(name)
    except UsageError:
        sc = None
    if sc is not None:
        target = target_mod.of_scenario(sc, target_file)
    elif target_file is not None:
        target = target_mod.load_file(target_file)
    else:
        target = None
    lines = [target.describe()] if target is not None else []
    lines += render_tables(stagetable.tables(results, target))
    plots = Path(run_dir) / "plots"
    safewrite.make_dir(plots, run_dir)  # a run stopped before its report has none yet
    plot = stagetable.stage_plot(results, plots / "stages.png")
    if plot is not None:
        lines.append(f"\nplot: {plot}")
    return "\n".join(lines)


def main(request: Request) -> int:
    print(run(request.run_dir, request.target))
    return EXIT_OK


if __name__ == "__main__":
    print("python -m harness.commands.target_report is now: python run_bench.py target-report "
          f"{shlex.join(sys.argv[1:])}".rstrip(), file=sys.stderr)
    sys.exit(EXIT_USAGE)
