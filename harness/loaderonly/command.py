"""``--loader-only`` (harness/cli/ dispatches the bench request here): each storage's read path
measured (harness.loaderonly.readpath) beside a RAM gather and the article's per-row reads, its
rows written to ``loader.jsonl`` (and ``decode.jsonl``: decode + resize per image by source size,
for the pixels fields) in a run directory, and the tables printed (harness.loaderonly.tables)."""
from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path

from harness.config import datasetup
from harness.config.request import BenchRequest
from harness.config.scenario import Scenario
from harness.errors import EXIT_OK
from harness.loaderonly.readpath import CACHE_STATES, benchmark
from harness.loaderonly.rows import DecodeRow, LoaderRow, write_rows
from harness.loaderonly.tables import render
from harness.results import rundir
from harness.results.environment import Environment
from harness.run import settle

__all__ = ["CACHE_STATES", "main", "run"]


def run(scenario: Scenario, data_dir: Path, run_dir: Path, cache_states: Sequence[str] = CACHE_STATES, *,
        workloads: Sequence[str] | None = None, batch_size: int | None = None, seconds: float = 1.0,
        batches: int = 400, cold_batches: int = 8, seed: int = 0,
        progress: bool = False) -> tuple[list[LoaderRow], list[DecodeRow]]:
    """Time every storage's read path (and the two references) per fields and cache state; write
    ``loader.jsonl`` (and ``decode.jsonl`` for pixels) in ``run_dir``; the rows and the decode
    rows."""
    rows, decode = benchmark(scenario, data_dir, cache_states, workloads=workloads, batch_size=batch_size,
                             seconds=seconds, batches=batches, cold_batches=cold_batches, seed=seed,
                             progress=progress)
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    write_rows(run_dir / "loader.jsonl", rows)
    if decode:
        write_rows(run_dir / "decode.jsonl", decode)
    return rows, decode


def main(request: BenchRequest) -> int:
    """The scenario and its cells settled as the main run settles them (harness.run.settle:
    --dry-run lists them), then the read path of each storage of the selected cells (--only,
    --exclude)."""
    settled = settle.prepare(request)
    if settled is None:
        return EXIT_OK
    sc, cells, _, _ = settled
    storages = list(dict.fromkeys(cell.choice("storage") for cell in cells))
    return run_loader_only(request, dataclasses.replace(sc, matrix={**sc.matrix, "storage": storages}))


def run_loader_only(request: BenchRequest, sc: Scenario) -> int:
    """Each storage's read path alone, beside a RAM gather and the article's per-row reads, into a
    new run directory; the tables printed."""
    argv = list(request.argv)
    run_dir = rundir.new_run_dir(request.out, f"{sc.name}-loader")
    env = Environment.capture(argv, {"mode": "loader-only", "accelerator": None, "world_size": 1})
    dataclasses.replace(env, scenario=sc.name, dataset=sc.dataset.to_dict(), cache_state=request.cache_state,
                        argv=argv, imported=datasetup.import_env(sc)).write(run_dir)
    states = CACHE_STATES if request.cache_state == "as-is" else (request.cache_state,)
    rows, decode = run(sc, request.data_dir, run_dir, states, progress=not request.quiet)
    print(render(rows, decode))
    print(f"\nresults: {run_dir}", file=sys.stderr)
    return EXIT_OK
