"""`run_bench.py report RUN_DIR`: every table, summary.csv, report.md and the plots rebuilt from a run
directory alone."""
from __future__ import annotations

from pathlib import Path

from harness.errors import EXIT_OK, UsageError
from harness.report import report
from harness.results import rundir
from harness.results.cellresult import CellResult


def read_run(run_dir: Path) -> list[CellResult]:
    """A run directory's results; a UsageError when it has none."""
    if not Path(run_dir).is_dir():
        raise UsageError(f"{run_dir} is not a directory; pass a run directory under results/")
    cells = rundir.read_results(run_dir)
    if not cells:
        raise UsageError(f"{run_dir}/cells.jsonl is missing or empty; pass a run directory under results/")
    return cells


def main(args) -> int:
    try:
        cells = read_run(args.run_dir)
        cells_1x = read_run(args.with_1x) if args.with_1x else None
        env = rundir.read_env(args.run_dir)
    except rundir.ResultsError as err:
        raise UsageError(str(err)) from None
    print(report.write_all(args.run_dir, cells, env, cells_1x, what_if_cores=args.what_if_cores))
    return EXIT_OK
