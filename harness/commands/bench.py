"""The main job: run a scenario's matrix in real DDP ranks (spawned, or joined under torchrun) and
write the report. The door (harness/cli/) hands in the baseline gate when the request asks for one
(`RunGate`, harness.gates.mainrun): checked before anything runs, applied after the report; it
dispatches --loader-only to harness.loaderonly. The core imports no feature."""
from __future__ import annotations

import dataclasses
import signal
import sys
import time
from pathlib import Path
from typing import Protocol

from harness.config import scenario
from harness.config.launchconfig import check_data_space
from harness.config.matrix import Cell
from harness.config.request import BenchRequest
from harness.device.devices import ranks_per_gpu, run_device_name
from harness.errors import EXIT_OK, EXIT_REGRESSION, UsageError
from harness.measure import gpuinfo
from harness.report import report
from harness.results import rundir
from harness.results.cellresult import CellResult
from harness.results.environment import Environment
from harness.run import budgetstate, launch, remoterun, resume, settle, stopguard, supervisor
from harness.run.settle import local_ranks


class RunGate(Protocol):
    """What the door hands the run for --baseline / --save-baseline
    (harness.gates.mainrun.BaselineRunGate)."""

    def check(self, scenario_name: str, comparable: dict) -> None:
        """Before anything runs: the baseline loaded and checked (settings and machine); raises to
        stop."""

    def apply(self, run_dir: Path) -> int:
        """After the report: the run saved as a baseline and/or compared with it; the exit code it
        adds."""


def comparable_of(sc: scenario.Scenario, device: str, cache_state: str = "as-is",
                  name: str | None = None) -> dict:
    """What a baseline and a run must share to be compared (harness.gates.baseline). `name`: the
    device's name (default: `run_device_name`)."""
    t = sc.training
    return {"dataset_key": sc.dataset.key(), "world_size": sc.world_size, "workload": t.workload,
            "batch_size": t.batch_size, "accelerator": sc.accelerator.name, "emulated": device != "cuda",
            "device": name or run_device_name(sc.accelerator.name, device), "image_size": t.image_size,
            "steps": t.steps,
            "epochs": t.epochs, "warmup_steps": t.warmup_steps, "workers": t.workers,
            "prefetch_factor": t.prefetch_factor, "cache_state": cache_state, "decoder": t.decoder,
            **({"gpu": gpuinfo.comparability_key()} if device == "cuda" else {})}


def spawn_ranks(config: launch.LaunchConfig, env: Environment) -> bool:
    """Run every cell in spawned ranks, watched: a cell whose rank dies or hangs is recorded as
    failed and fresh ranks go on; False when a cell failed so (exit 1)."""
    data_paths, failures = launch.spawn(config)
    env.dataset_gb = launch.dataset_gb(data_paths)
    env.write(config.run_dir)
    if failures:
        print(f"run_bench.py: {len(failures)} cell(s) failed when a rank died or hung; the other cells ran:\n  "
              + "\n  ".join(failures), file=sys.stderr)
    return not failures


def finish_run(request: BenchRequest, run_dir: Path, env: Environment, gate: RunGate | None,
               ok: bool, run_target=None) -> int:
    """The report from cells.jsonl, the sampler contract, and the baseline gate (saved and/or
    compared)."""
    cells_done: list[CellResult] = rundir.read_results(run_dir)
    print(report.write_all(run_dir, cells_done, env, what_if_cores=request.what_if_cores, target=run_target))
    code = EXIT_OK if ok else EXIT_REGRESSION
    broken = [c.cell for c in cells_done if not c.contract_ok]
    if broken:
        print(f"run_bench.py: the sampler contract is broken in {len(broken)} cell(s): {'; '.join(broken)}",
              file=sys.stderr)
        code = EXIT_REGRESSION
    if gate is not None:
        code = max(code, gate.apply(run_dir))
    print(f"\nresults: {run_dir}", file=sys.stderr)
    return code



def main(request: BenchRequest, gate: RunGate | None = None) -> int:
    """The scenario (with the command line's overrides and data), its cells, then the cells listed
    (--dry-run) or the run, with `gate` (the baseline gate the door handed in) when the request
    asks for one."""
    settled = settle.prepare(request)
    if settled is None:  # --dry-run: the cells listed
        return EXIT_OK
    sc, cells, device, run_target = settled
    return run(request, sc, cells, device, run_target, gate)



def run(request: BenchRequest, sc: scenario.Scenario, cells: list[Cell], device: str, run_target=None,
        gate: RunGate | None = None) -> int:
    """The run: the data's room, the baseline checked, the run directory, then the cells in ranks
    (spawned, or this torchrun rank), the request carried whole in the LaunchConfig."""
    r = request
    if r.local_rank == 0:  # the process that writes the datasets
        check_data_space(sc, cells, r.data_dir, r.regenerate)
    sharing = ranks_per_gpu(local_ranks(r, sc), gpuinfo.gpu_count()) if r.share_gpu and device == "cuda" else 1
    comparable = comparable_of(sc, device, r.cache_state, run_device_name(sc.accelerator.name, device, sharing))
    if gate is not None:  # fail fast, before anything runs: the settings, and the machine (the probe later)
        gate.check(sc.name, comparable)
    settings = resume.settings_of(r, sc, cells, device, comparable)
    run_dir, env = (r.out, None) if r.rank != 0 else resume.open_run_dir(r, sc, device, comparable, len(cells),
                                                                         settings)
    budget_s = r.settled_budget_s(sc.budget_s)
    if budget_s and r.budget_s is None and r.rank == 0 and not r.quiet:
        print(f"budget: passes until every effect is decided, for at most {budget_s / 60:g} min (the scenario's "
              "[run] budget_s; --quick: one pass)", file=sys.stderr)
    config = launch.LaunchConfig(r, sc, cells, run_dir, device, device_name=comparable["device"], budget_s=budget_s,
                                 started_at=time.time() - spent_before(r, run_dir, budget_s))
    return remoterun.with_remote(sc, r.torchrun is not None, run_dir, lambda counters: run_until_stopped(
        dataclasses.replace(config, remote_counters=counters), env, gate, run_target))


def spent_before(request: BenchRequest, run_dir: Path, budget_s: float) -> float:
    """The budget's clock a resumed run goes on from (0 for a new run, or on a rank other than
    0)."""
    if not (request.resume and budget_s and request.rank == 0):
        return 0.0
    return budgetstate.spent(run_dir)


def stopped(request: BenchRequest, run_dir: Path, env: Environment, code: int, run_target=None) -> int:
    """Ctrl-C or SIGTERM: the report over the cells written so far (with the run's target, as a
    finished run's), how to resume, exit 130 or 143."""
    cells_done = rundir.read_results(run_dir)
    if cells_done:
        print(report.write_all(run_dir, cells_done, env, what_if_cores=request.what_if_cores, target=run_target))
    why = "interrupted (SIGINT)" if code == 130 else "terminated (SIGTERM)"
    print(resume.stopped_message(run_dir, why, request.torchrun is not None), file=sys.stderr)
    return code


def run_until_stopped(config: launch.LaunchConfig, env: Environment | None, gate: RunGate | None,
                      run_target=None) -> int:
    """The cells, spawned or as this torchrun rank; on Ctrl-C or SIGTERM the report over the cells
    written and how to resume (exit 130 or 143)."""
    signal.signal(signal.SIGTERM, supervisor.raise_interrupted)
    request = config.request

    torchrun = request.torchrun is not None

    def ending(code: int) -> None:
        if request.rank == 0:
            stopped(request, config.run_dir, env, code, run_target)

    guard = stopguard.StopGuard(ending) if torchrun else None  # under a scheduler's KillWait: an ending for sure
    try:
        if not torchrun:
            return finish_run(request, config.run_dir, env, gate, spawn_ranks(config, env), run_target)
        return run_torchrun_rank(config, env, gate, run_target)
    except (KeyboardInterrupt, supervisor.Interrupted) as err:
        code = err.code if isinstance(err, supervisor.Interrupted) else 130
        if guard is not None:
            guard.end(code)
        else:
            ending(code)
        return code


def run_torchrun_rank(config: launch.LaunchConfig, env: Environment | None, gate: RunGate | None,
                      run_target=None) -> int:
    """Under torchrun: no respawn. A failure ends the run with every finished cell written and the
    command that resumes it."""
    request = config.request
    rank = request.rank
    if rank == 0:  # the plan (its random order, what is left to resume) goes from rank 0 to every rank
        config.plan = supervisor.visits_left(config) if request.resume else config.full_plan()
    try:
        data_paths = launch.rank_main(rank, request.local_rank, config.scenario.world_size, config)
    except (UsageError, KeyboardInterrupt, supervisor.Interrupted):
        raise
    except Exception as err:
        if rank == 0:
            print(resume.stopped_message(config.run_dir, f"rank {rank} failed ({type(err).__name__}: "
                                         f"{' '.join(str(err).split())[:200]})", torchrun=True), file=sys.stderr)
        return EXIT_REGRESSION
    if rank != 0:
        return EXIT_OK
    env.dataset_gb = launch.dataset_gb(data_paths)
    env.write(config.run_dir)
    return finish_run(request, config.run_dir, env, gate, True, run_target)
