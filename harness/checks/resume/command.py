"""What a restart costs per loader and storage: time to the first batch (page cache warm and cold)
and the samples repeated or dropped by a mid-epoch resume from each loader's own state, the
harness's position, or nothing (measuring.py measures, counting.py counts, table.py prints). Writes
resume.jsonl in a new run directory; docs/resume-cost.md has a measured table.

    python run_bench.py check-resume --scenario loaders --samples 512
    python run_bench.py check-resume --scenario formats --loader workers --in-process
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from harness.checks.resume import measuring, table
from harness.config import scenario as scenario_mod
from harness.config.scenariofields import stop_within_epoch
from harness.errors import EXIT_OK, UsageError
from harness.results import rundir

EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a run stopped by Ctrl-C


@dataclass(frozen=True)
class CheckResumeRequest:
    """`run_bench.py check-resume --scenario NAME [--loader NAME ...] [--stop N]
    [--in-process]`."""

    scenario: str
    data_dir: Path = Path("data")
    out: Path = Path("results")
    loaders: tuple[str, ...] = ()  # only these loaders of the scenario (litdata: litdata's own loader)
    stop: int = 0  # batches read before the stop (0: half the epoch)
    in_process: bool = False  # restart in this process, not a fresh one
    samples: int | None = None
    workload: str | None = None


Request = CheckResumeRequest  # what harness.cli builds


def main(request: CheckResumeRequest) -> int:
    if request.stop < 0:
        raise UsageError(f"--stop {request.stop}: give a number of batches >= 0 (0: half the epoch)")
    overrides = {k: v for k, v in (("samples", request.samples), ("workload", request.workload)) if v is not None}
    sc = scenario_mod.load(request.scenario, overrides)
    stop_within_epoch(request.stop, sc.dataset.samples, sc.world_size, sc.training.batch_size)
    try:
        return measure(request, sc)
    except KeyboardInterrupt:  # Ctrl-C: one line; the restart process and all it started are ended
        print("run_bench.py: check-resume interrupted (SIGINT); the rows measured so far are kept in its run "
              "directory's resume.jsonl", file=sys.stderr)
        return EXIT_INTERRUPTED


def measure(request: CheckResumeRequest, sc) -> int:
    """The cases measured into a new run directory's resume.jsonl, row by row, and the table."""
    measuring.jobs(sc, request.data_dir, request.loaders)  # bad input fails here, before a run directory
    run_dir = rundir.new_run_dir(request.out, f"{sc.name}-resume")
    rows = measuring.run(sc, request.data_dir, request.loaders, request.stop, not request.in_process,
                          on_row=lambda row: rundir.append_line(run_dir / "resume.jsonl", row))
    print("\n".join(table.table(rows)))
    print(f"rows: {run_dir / 'resume.jsonl'}")
    return EXIT_OK
