"""The main job: run a scenario's matrix in real DDP ranks (spawned, or joined under torchrun), write the
report, and save or compare a baseline (the CI gate)."""
from __future__ import annotations

import argparse
import dataclasses
import os
import signal
import sys
import time
from pathlib import Path

from harness.commands import resume
from harness.commands.compare_runs import run_as_baseline, show_comparison
from harness.config import runsetup, scenario, target
from harness.config.matrix import expand, select
from harness.config.runconfig import check_data_space
from harness.config.runsetup import CC3M_SAMPLES, full_scale, with_source
from harness.device.devices import run_device_name
from harness.errors import EXIT_OK, EXIT_REGRESSION, UsageError
from harness.measure import gpuinfo
from harness.report import compare, report
from harness.results import rundir
from harness.results.baseline import Baseline
from harness.results.cellresult import CellResult
from harness.results.environment import Environment
from harness.run import launch, stopguard, supervisor


def comparable_of(sc: scenario.Scenario, device: str, cache_state: str = "as-is",
                  name: str | None = None) -> dict:
    """What a baseline and a run must share to be compared (harness.report.compare). `name`: the device's name
    (default: `run_device_name`)."""
    t = sc.training
    return {"dataset_key": sc.dataset.key(), "world_size": sc.world_size, "workload": t.workload,
            "batch_size": t.batch_size, "accelerator": sc.accelerator.name, "emulated": device != "cuda",
            "device": name or run_device_name(sc.accelerator.name, device), "image_size": t.image_size,
            "steps": t.steps,
            "epochs": t.epochs, "warmup_steps": t.warmup_steps, "workers": t.workers,
            "prefetch_factor": t.prefetch_factor, "cache_state": cache_state, "decoder": t.decoder,
            **({"gpu": gpuinfo.comparability_key()} if device == "cuda" else {})}


def load_plugins(modules: list[str]) -> None:
    from strategies import registry

    for module in modules:
        try:
            registry.load_plugin(module)
        except registry.PluginError as err:
            raise UsageError(f"--plugin {module}: {err}") from None


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


def finish_run(args: argparse.Namespace, run_dir: Path, env: Environment, baseline: Baseline | None,
               ok: bool) -> int:
    """The report from cells.jsonl, the sampler contract, and the baseline (saved and/or compared)."""
    cells_done: list[CellResult] = rundir.read_results(run_dir)
    print(report.write_all(run_dir, cells_done, env, what_if_cores=args.what_if_cores,
                           target=getattr(args, "run_target", None)))
    code = EXIT_OK if ok else EXIT_REGRESSION
    broken = [c.cell for c in cells_done if not c.contract_ok]
    if broken:
        print(f"run_bench.py: the sampler contract is broken in {len(broken)} cell(s): {'; '.join(broken)}",
              file=sys.stderr)
        code = EXIT_REGRESSION
    if args.save_baseline or baseline is not None:
        current = run_as_baseline(run_dir)
        if args.save_baseline:
            current.save(args.save_baseline)
            print(f"baseline written: {args.save_baseline}", file=sys.stderr)
        if baseline is not None:
            code = max(code, show_comparison(compare.compare(current, baseline, args.raw, args.min_effect,
                                                             args.alpha, args.strict, args.gate_metric),
                                             run_dir / "comparison.md"))
    print(f"\nresults: {run_dir}", file=sys.stderr)
    return code


def run_loader_only(args: argparse.Namespace, argv: list[str], sc: scenario.Scenario) -> int:
    """--loader-only: each storage's read path alone, beside a RAM gather and the article's per-row reads."""
    from harness.commands import loaderonly  # h5py, PIL and the article's code: only for this command

    run_dir = rundir.new_run_dir(args.out, f"{sc.name}-loader")
    env = Environment.capture(argv, {"mode": "loader-only", "accelerator": None, "world_size": 1})
    dataclasses.replace(env, scenario=sc.name, dataset=sc.dataset.to_dict(), cache_state=args.cache_state,
                        argv=argv, imported=runsetup.import_env(sc)).write(run_dir)
    states = loaderonly.CACHE_STATES if args.cache_state == "as-is" else (args.cache_state,)
    loaderonly.run(sc, args.data_dir, run_dir, states, progress=not args.quiet)
    print(f"\nresults: {run_dir}", file=sys.stderr)
    return EXIT_OK


def main(args: argparse.Namespace, argv: list[str]) -> int:
    load_plugins(args.plugin)
    if args.repeats < 1:
        raise UsageError(f"--repeats = {args.repeats} must be a positive integer")
    overrides = {k: getattr(args, k) for k in scenario.OVERRIDES}
    if args.scale == "full" and args.samples is None and args.data is None:
        overrides["samples"] = CC3M_SAMPLES
    torchrun = "RANK" in os.environ and "WORLD_SIZE" in os.environ
    if torchrun:
        overrides["world_size"] = int(os.environ["WORLD_SIZE"])
    sc = with_source(args, scenario.load(args.scenario, overrides))  # --data, [dataset] source
    if args.scale == "full":
        sc = full_scale(sc)
    args.run_target = target.of_scenario(sc, args.target)  # a mistake in it stops here, before anything runs
    device = launch.resolve_device(args.device, int(os.environ.get("LOCAL_WORLD_SIZE", sc.world_size)))
    cells = select(expand(sc), args.only, args.exclude)
    rundir.check_writable_dir(args.out, "--out")  # the output paths, before anything is measured
    if args.save_baseline:
        rundir.check_writable_file(args.save_baseline, "--save-baseline")
    if args.dry_run:
        for i, cell in enumerate(cells, 1):
            print(f"{i:3d}  {cell.id}")
        print(f"{len(cells)} cells x {args.repeats} repeats x {sc.world_size} ranks ({device})", file=sys.stderr)
        return EXIT_OK
    runsetup.scan_source(sc, args.data_dir, not args.quiet, args)  # an imported source: its size, corrupt JPEGs
    if args.loader_only:  # the storages of the selected cells (--only, --exclude)
        storages = list(dict.fromkeys(cell.choice("storage") for cell in cells))
        return run_loader_only(args, argv, dataclasses.replace(sc, matrix={**sc.matrix, "storage": storages}))
    if int(os.environ.get("LOCAL_RANK", 0)) == 0:  # the process that writes the datasets
        check_data_space(sc, cells, args.data_dir, args.regenerate)
    comparable = comparable_of(sc, device, args.cache_state)
    baseline = Baseline.load(args.baseline) if args.baseline else None
    if baseline is not None:  # fail fast, before anything runs
        compare.check_comparable(sc.name, comparable, baseline)
    rank = int(os.environ.get("RANK", 0))
    args.order_seed = resume.order_seed(args)
    settings = resume.settings_of(args, sc, cells, device, comparable)
    run_dir, env = (args.out, None) if rank != 0 else resume.open_run_dir(args, argv, sc, device, comparable,
                                                                           len(cells), settings)
    config = launch.LaunchConfig(sc, cells, run_dir, args.data_dir, device, plugins=args.plugin,
                                 progress=not args.quiet, cache_state=args.cache_state,
                                 decompose=args.decompose, profile=args.profile, repeats=args.repeats,
                                 device_name=comparable["device"], regenerate=args.regenerate,
                                 verify_data=args.verify_data, order=args.order, order_seed=args.order_seed,
                                 budget_s=args.budget, min_effect=args.min_effect, started_at=time.time())
    return run_until_stopped(args, config, env, baseline, rank, torchrun)


def run_until_stopped(args: argparse.Namespace, config: launch.LaunchConfig, env: Environment | None,
                      baseline: Baseline | None, rank: int, torchrun: bool) -> int:
    """The cells, spawned or as this torchrun rank; on Ctrl-C or SIGTERM the report over the cells written
    and how to resume (exit 130 or 143)."""
    signal.signal(signal.SIGTERM, supervisor.raise_interrupted)

    def ending(code: int) -> None:
        if rank == 0:
            resume.stopped(args, config.run_dir, env, code, torchrun)

    guard = stopguard.StopGuard(ending) if torchrun else None  # under a scheduler's KillWait: an ending for sure
    try:
        if not torchrun:
            return finish_run(args, config.run_dir, env, baseline, spawn_ranks(config, env))
        return run_torchrun_rank(args, config, env, baseline, rank)
    except (KeyboardInterrupt, supervisor.Interrupted) as err:
        code = err.code if isinstance(err, supervisor.Interrupted) else 130
        if guard is not None:
            guard.end(code)
        else:
            ending(code)
        return code


def run_torchrun_rank(args: argparse.Namespace, config: launch.LaunchConfig, env: Environment | None,
                      baseline: Baseline | None, rank: int) -> int:
    """Under torchrun: no respawn. A failure ends the run with every finished cell written and the command
    that resumes it."""
    if rank == 0:  # the plan (its random order, what is left to resume) goes from rank 0 to every rank
        config.plan = supervisor.remaining(config, config.full_plan()) if args.resume else config.full_plan()
    try:
        data_paths = launch.rank_main(rank, int(os.environ.get("LOCAL_RANK", 0)), config.scenario.world_size,
                                      config)
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
    return finish_run(args, config.run_dir, env, baseline, True)
