"""``--loader-only`` into a run directory: each storage's read path measured (harness.run.loaderonly_bench)
and its rows written to ``loader.jsonl`` (and ``decode.jsonl``: decode + resize per image by source size, for
the pixels fields); harness.commands.bench prints the tables (harness.report.loaderonly_tables)."""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from harness.config.scenario import Scenario
from harness.results.loaderonly_rows import DecodeRow, LoaderRow, write_rows
from harness.run.loaderonly_bench import CACHE_STATES, benchmark

__all__ = ["CACHE_STATES", "run"]


def run(scenario: Scenario, data_dir: Path, run_dir: Path, cache_states: Sequence[str] = CACHE_STATES, *,
        workloads: Sequence[str] | None = None, batch_size: int | None = None, seconds: float = 1.0,
        batches: int = 400, cold_batches: int = 8, seed: int = 0,
        progress: bool = False) -> tuple[list[LoaderRow], list[DecodeRow]]:
    """Time every storage's read path (and the two references) per fields and cache state; write
    ``loader.jsonl`` (and ``decode.jsonl`` for pixels) in ``run_dir``; the rows and the decode rows."""
    rows, decode = benchmark(scenario, data_dir, cache_states, workloads=workloads, batch_size=batch_size,
                             seconds=seconds, batches=batches, cold_batches=cold_batches, seed=seed,
                             progress=progress)
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    write_rows(run_dir / "loader.jsonl", rows)
    if decode:
        write_rows(run_dir / "decode.jsonl", decode)
    return rows, decode
