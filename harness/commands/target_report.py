"""The per-stage table, plots/stages.png and, with a target, each cell's prediction there and the
configuration to use, from a run directory alone (harness.report.stagetable):

    python -m harness.commands.target_report RUN_DIR [--target FILE]

Without --target the scenario's [target] table is used when it has one (the run's env.json names the
scenario)."""
from __future__ import annotations

import argparse
from pathlib import Path

from harness.config import scenario as scenario_mod
from harness.config import target as target_mod
from harness.errors import EXIT_OK, UsageError, run_module
from harness.report import stagetable
from harness.report.tables import render_tables
from harness.results import rundir


def run(run_dir: Path, target_file: Path | None = None) -> str:
    results = rundir.read_results(run_dir)
    if not results:
        raise UsageError(f"{run_dir}: no cells.jsonl lines to report; give a run directory")
    name = getattr(rundir.read_env(run_dir), "scenario", None) or results[0].scenario
    try:
        sc = scenario_mod.load(name)
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
    plot = stagetable.stage_plot(results, Path(run_dir) / "plots" / "stages.png")
    if plot is not None:
        lines.append(f"\nplot: {plot}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m harness.commands.target_report")
    p.add_argument("run_dir", type=Path)
    p.add_argument("--target", type=Path, metavar="FILE")
    a = p.parse_args(argv)
    print(run(a.run_dir, a.target))
    return EXIT_OK


if __name__ == "__main__":
    run_module("target_report", main)
