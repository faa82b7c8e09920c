"""`run_bench.py report RUN_DIR`: every table, summary.csv, report.md and the plots rebuilt from a
run directory alone."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness.config import scenario, target
from harness.errors import EXIT_OK, UsageError
from harness.report import report
from harness.results import rundir
from harness.results.cellresult import CellResult


@dataclass(frozen=True)
class Request:
    run_dir: Path
    with_1x: Path | None = None  # a one-rank run of the same matrix, for the scaling-efficiency table
    what_if_cores: float | None = None
    target: Path | None = None  # --target FILE (default: the run's scenario's [target], if at hand)


def read_run(run_dir: Path) -> list[CellResult]:
    """A run directory's results; a UsageError when it has none."""
    if not Path(run_dir).is_dir():
        raise UsageError(f"{run_dir} is not a directory; pass a run directory under results/")
    cells = rundir.read_visits(run_dir)
    if not cells:
        raise UsageError(f"{run_dir}/cells.jsonl is missing or empty; pass a run directory under results/")
    return cells


def run_target_of(scenario_name: str, target_file: Path | None):
    """--target FILE, else the run's scenario's [target] table when it is a shipped one, else
    None."""
    try:
        sc = scenario.load_shipped(scenario_name)
    except UsageError:
        if target_file is None:
            return None
        raise
    return target.of_scenario(sc, target_file)


def main(request: Request) -> int:
    try:
        cells = read_run(request.run_dir)
        cells_1x = read_run(request.with_1x) if request.with_1x else None
        env = rundir.read_env(request.run_dir)
    except rundir.ResultsError as err:
        raise UsageError(str(err)) from None
    run_target = run_target_of(env.scenario, request.target)
    print(report.write_all(request.run_dir, cells, env, cells_1x, what_if_cores=request.what_if_cores,
                           target=run_target))
    return EXIT_OK
