"""The main job: run a scenario's matrix in real DDP ranks (spawned, or joined under torchrun), write the
report, and save or compare a baseline (the CI gate)."""
from __future__ import annotations

import dataclasses
import signal
import sys
import time
from pathlib import Path

from harness.analysis import baselinegate
from harness.analysis.gateinput import run_as_baseline
from harness.config import datasetup, scenario, target
from harness.config.datasetup import CC3M_SAMPLES, full_scale, with_source
from harness.config.matrix import Cell, expand, runnable, select
from harness.config.request import BenchRequest
from harness.config.runconfig import check_data_space
from harness.device.devices import ranks_per_gpu, run_device_name
from harness.errors import EXIT_OK, EXIT_REGRESSION, UsageError
from harness.measure import gpuinfo
from harness.report import gatetable, report
from harness.results import rundir
from harness.results.baseline import Baseline, machine_of
from harness.results.cellresult import CellResult
from harness.results.environment import Environment
from harness.run import budgetstate, launch, remoterun, resume, stopguard, supervisor


def comparable_of(sc: scenario.Scenario, device: str, cache_state: str = "as-is",
                  name: str | None = None) -> dict:
    """What a baseline and a run must share to be compared (harness.analysis.baselinegate). `name`: the device's name
    (default: `run_device_name`)."""
    t = sc.training
    return {"dataset_key": sc.dataset.key(), "world_size": sc.world_size, "workload": t.workload,
            "batch_size": t.batch_size, "accelerator": sc.accelerator.name, "emulated": device != "cuda",
            "device": name or run_device_name(sc.accelerator.name, device), "image_size": t.image_size,
            "steps": t.steps,
            "epochs": t.epochs, "warmup_steps": t.warmup_steps, "workers": t.workers,
            "prefetch_factor": t.prefetch_factor, "cache_state": cache_state, "decoder": t.decoder,
            **({"gpu": gpuinfo.comparability_key()} if device == "cuda" else {})}


def spawn_ranks(config: launch.LaunchConfig, env: Environment) -> bool:
    """Run every cell in spawned ranks, watched: a cell whose rank dies or hangs is recorded as failed and
    fresh ranks go on; False when a cell failed so (exit 1)."""
    data_paths, failures = launch.spawn(config)
    env.dataset_gb = launch.dataset_gb(data_paths)
    env.write(config.run_dir)
    if failures:
        print(f"run_bench.py: {len(failures)} cell(s) failed when a rank died or hung; the other cells ran:\n  "
              + "\n  ".join(failures), file=sys.stderr)
    return not failures


def finish_run(request: BenchRequest, run_dir: Path, env: Environment, baseline: Baseline | None,
               ok: bool, run_target=None) -> int:
    """The report from cells.jsonl, the sampler contract, and the baseline (saved and/or compared)."""
    cells_done: list[CellResult] = rundir.read_results(run_dir)
    print(report.write_all(run_dir, cells_done, env, what_if_cores=request.what_if_cores, target=run_target))
    code = EXIT_OK if ok else EXIT_REGRESSION
    broken = [c.cell for c in cells_done if not c.contract_ok]
    if broken:
        print(f"run_bench.py: the sampler contract is broken in {len(broken)} cell(s): {'; '.join(broken)}",
              file=sys.stderr)
        code = EXIT_REGRESSION
    gate = request.gate
    if gate.save_baseline or baseline is not None:
        current = run_as_baseline(run_dir)
        if gate.save_baseline:
            current.save(gate.save_baseline)
            print(f"baseline written: {gate.save_baseline}", file=sys.stderr)
        if baseline is not None:
            code = max(code, gatetable.show(baselinegate.judge(current, baseline, gate.raw, gate.min_effect,
                                                          gate.alpha, gate.strict, gate.metric),
                                            run_dir / "comparison.md"))
    print(f"\nresults: {run_dir}", file=sys.stderr)
    return code


def run_loader_only(request: BenchRequest, sc: scenario.Scenario) -> int:
    """--loader-only: each storage's read path alone, beside a RAM gather and the article's per-row reads."""
    from harness.report.loaderonly_tables import render
    from harness.run import loaderonly_run  # h5py, PIL and the article's code: only for this command

    argv = list(request.argv)
    run_dir = rundir.new_run_dir(request.out, f"{sc.name}-loader")
    env = Environment.capture(argv, {"mode": "loader-only", "accelerator": None, "world_size": 1})
    dataclasses.replace(env, scenario=sc.name, dataset=sc.dataset.to_dict(), cache_state=request.cache_state,
                        argv=argv, imported=datasetup.import_env(sc)).write(run_dir)
    states = loaderonly_run.CACHE_STATES if request.cache_state == "as-is" else (request.cache_state,)
    rows, decode = loaderonly_run.run(sc, request.data_dir, run_dir, states, progress=not request.quiet)
    print(render(rows, decode))
    print(f"\nresults: {run_dir}", file=sys.stderr)
    return EXIT_OK


def main(request: BenchRequest) -> int:
    """The scenario (with the command line's overrides and data), its cells, then one of three modes: the
    cells listed (--dry-run), each storage's read path alone (--loader-only), or the run."""
    sc, cells, device, run_target = settle(request)
    if request.dry_run:
        for i, cell in enumerate(cells, 1):
            print(f"{i:3d}  {cell.id}")
        print(f"{len(cells)} cells x {request.repeats} repeats x {sc.world_size} ranks ({device})", file=sys.stderr)
        return EXIT_OK
    datasetup.scan_source(sc, request.data_dir, not request.quiet, request.overrides)  # an imported source
    if request.loader_only:  # the storages of the selected cells (--only, --exclude)
        storages = list(dict.fromkeys(cell.choice("storage") for cell in cells))
        return run_loader_only(request, dataclasses.replace(sc, matrix={**sc.matrix, "storage": storages}))
    return run(request, sc, cells, device, run_target)


def local_ranks(request: BenchRequest, sc: scenario.Scenario) -> int:
    """The ranks on this node: torchrun's, else every rank of the scenario (spawned here)."""
    return request.torchrun.local_world_size if request.torchrun else sc.world_size


def settle(request: BenchRequest) -> tuple[scenario.Scenario, list[Cell], str, target.Target | None]:
    """(the scenario, its cells, the device, the target), each settled once from the request; a mistake in
    any of them, or an output path that cannot be written, stops here, before anything runs."""
    r = request
    overrides = r.overrides.given()
    if r.data.scale == "full" and r.overrides.samples is None and r.data.path is None:
        overrides["samples"] = CC3M_SAMPLES
    if r.torchrun:
        overrides["world_size"] = r.torchrun.world_size
    sc = with_source(scenario.load(r.scenario, overrides), r.data, r.overrides.samples)  # --data, [dataset] source
    if r.data.scale == "full":
        sc = full_scale(sc)
    run_target = target.of_scenario(sc, r.target)  # a mistake in it stops here, before anything runs
    device = launch.resolve_device(r.device, local_ranks(r, sc), r.torchrun, share_gpu=r.share_gpu)
    shipped = sc.path is not None and Path(sc.path).resolve().parent == scenario.SCENARIO_DIR.resolve()
    cells = select(expand(sc), list(r.only), list(r.exclude), check=not shipped)
    if shipped:  # a scenario of the project's runs the cells this machine can, and says what it left out
        cells, notes = runnable(cells)
        for note in notes:
            print(f"{sc.name}: {note} (the other cells run)", file=sys.stderr)
    rundir.check_writable_dir(r.out, "--out")  # the output paths, before anything is measured
    if r.gate.save_baseline:
        rundir.check_writable_file(r.gate.save_baseline, "--save-baseline")
    return sc, cells, device, run_target


def run(request: BenchRequest, sc: scenario.Scenario, cells: list[Cell], device: str, run_target=None) -> int:
    """The run: the data's room, the baseline checked, the run directory, then the cells in ranks (spawned,
    or this torchrun rank), the request carried whole in the LaunchConfig."""
    r = request
    if r.local_rank == 0:  # the process that writes the datasets
        check_data_space(sc, cells, r.data_dir, r.regenerate)
    sharing = ranks_per_gpu(local_ranks(r, sc), gpuinfo.gpu_count()) if r.share_gpu and device == "cuda" else 1
    comparable = comparable_of(sc, device, r.cache_state, run_device_name(sc.accelerator.name, device, sharing))
    baseline = Baseline.load(r.gate.baseline) if r.gate.baseline else None
    if baseline is not None:  # fail fast, before anything runs: the settings, and the machine (the probe later)
        baselinegate.check_comparable(sc.name, comparable, baseline)
        baselinegate.check_machine(machine_of(Environment.capture([], {})), None, baseline)
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
        dataclasses.replace(config, remote_counters=counters), env, baseline, run_target))


def spent_before(request: BenchRequest, run_dir: Path, budget_s: float) -> float:
    """The budget's clock a resumed run goes on from (0 for a new run, or on a rank other than 0)."""
    if not (request.resume and budget_s and request.rank == 0):
        return 0.0
    return budgetstate.spent(run_dir)


def stopped(request: BenchRequest, run_dir: Path, env: Environment, code: int, run_target=None) -> int:
    """Ctrl-C or SIGTERM: the report over the cells written so far (with the run's target, as a finished run's),
    how to resume, exit 130 or 143."""
    cells_done = rundir.read_results(run_dir)
    if cells_done:
        print(report.write_all(run_dir, cells_done, env, what_if_cores=request.what_if_cores, target=run_target))
    why = "interrupted (SIGINT)" if code == 130 else "terminated (SIGTERM)"
    print(resume.stopped_message(run_dir, why, request.torchrun is not None), file=sys.stderr)
    return code


def run_until_stopped(config: launch.LaunchConfig, env: Environment | None, baseline: Baseline | None,
                      run_target=None) -> int:
    """The cells, spawned or as this torchrun rank; on Ctrl-C or SIGTERM the report over the cells written
    and how to resume (exit 130 or 143)."""
    signal.signal(signal.SIGTERM, supervisor.raise_interrupted)
    request = config.request

    torchrun = request.torchrun is not None

    def ending(code: int) -> None:
        if request.rank == 0:
            stopped(request, config.run_dir, env, code, run_target)

    guard = stopguard.StopGuard(ending) if torchrun else None  # under a scheduler's KillWait: an ending for sure
    try:
        if not torchrun:
            return finish_run(request, config.run_dir, env, baseline, spawn_ranks(config, env), run_target)
        return run_torchrun_rank(config, env, baseline, run_target)
    except (KeyboardInterrupt, supervisor.Interrupted) as err:
        code = err.code if isinstance(err, supervisor.Interrupted) else 130
        if guard is not None:
            guard.end(code)
        else:
            ending(code)
        return code


def run_torchrun_rank(config: launch.LaunchConfig, env: Environment | None, baseline: Baseline | None,
                      run_target=None) -> int:
    """Under torchrun: no respawn. A failure ends the run with every finished cell written and the command
    that resumes it."""
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
    return finish_run(request, config.run_dir, env, baseline, True, run_target)
