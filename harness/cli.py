"""Command line. Thin: parse, then call the harness. One function per command.

    run_bench.py --scenario NAME [options]     run a scenario's matrix (the default command)
    run_bench.py --list                        list the scenarios
    run_bench.py --self-test                   check the harness's own figures on a calibrated workload
    run_bench.py report RUN_DIR                rebuild every table and plot from cells.jsonl alone
    run_bench.py compare RUN_A RUN_B           compare run B with run A, cell by cell

Every command also takes --debug: an error then prints its full traceback instead of one line; the exit
code stays the same (2 or 3), so --debug in CI never turns an error into "1, a regression".

Exit codes:
    0  success, nothing regressed
    1  a significant regression (or a cell that errored where the baseline had a result), a broken sampler
       contract, a failed self-test or a crashed rank; with --strict also a cell whose comparison is
       inconclusive (too few repeats for the rank test to reach alpha; without --strict: exit 0 and one
       warning line)
    2  a usage or run error: one line on stderr, no traceback. Also any unexpected exception, which is a bug
       of the harness: one line that says so (rerun with --debug for the traceback); never 1, so a bug is
       not taken for a regression
    3  a baseline (or, for `compare`, either run directory) missing, incomplete (no env.json, probe.jsonl
       or cells.jsonl) or not comparable
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import traceback
from pathlib import Path

from harness import compare, gpuinfo, launch, report, results, resume, runsetup, scenario, supervisor
from harness.runsetup import CC3M_SAMPLES, full_scale, with_source
from harness.errors import UsageError
from harness.records import CellResult
from harness.matrix import expand, select

REPO = Path(__file__).resolve().parent.parent
EXIT_OK, EXIT_REGRESSION, EXIT_USAGE, EXIT_BASELINE = 0, 1, 2, 3


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse's default prints the whole usage
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="run_bench.py", description="Benchmark data-loading strategies under real DDP "
                      "training and print throughput, utilisation and memory tables. Also: "
                      "`run_bench.py report RUN_DIR` and `run_bench.py compare RUN_A RUN_B`.")
    p.add_argument("--scenario", help="a name from scenarios/ (see --list) or a path to a TOML file")
    p.add_argument("--list", action="store_true", help="list the scenarios and exit")
    p.add_argument("--self-test", action="store_true",
                   help="check measured throughput, stall and AU against a calibrated synthetic workload")
    knobs = p.add_argument_group("overrides of the scenario's settings")
    knobs.add_argument("--samples", type=int, help="dataset size")
    knobs.add_argument("--steps", type=int, help="measured steps per cell (after warm-up)")
    knobs.add_argument("--epochs", type=int, help="measure this many epochs' worth of steps instead")
    knobs.add_argument("--warmup-steps", type=int, help="steps run before the measured window")
    knobs.add_argument("--batch-size", type=int, help="samples per rank per step")
    knobs.add_argument("--workers", type=int, help="DataLoader workers per rank")
    knobs.add_argument("--world-size", type=int, help="number of ranks")
    knobs.add_argument("--workload", choices=scenario.WORKLOADS, help="pixels (decode JPEGs) or features")
    p.add_argument("--device", choices=("auto", "cuda", "emulated"), default="auto",
                   help="auto: real GPUs when there are enough for every rank, else emulate (default)")
    p.add_argument("--data-dir", type=Path, default=REPO / "data",
                   help="where generated datasets are kept and reused (default: data/)")
    p.add_argument("--out", type=Path, default=REPO / "results", help="where run directories go")
    p.add_argument("--plugin", action="append", default=[], metavar="MODULE",
                   help="import a module that registers extra strategies (repeatable)")
    p.add_argument("--quiet", action="store_true", help="no progress display")
    add_debug_option(p)
    cells = p.add_argument_group("selecting cells of the matrix")
    cells.add_argument("--only", action="append", default=[], metavar="AXIS=NAME[,NAME]",
                       help="run only cells with these strategies on that axis (repeatable)")
    cells.add_argument("--exclude", action="append", default=[], metavar="AXIS=NAME[,NAME]",
                       help="skip cells with these strategies on that axis (repeatable)")
    cells.add_argument("--dry-run", action="store_true", help="print the cells and exit without running")
    life = p.add_argument_group("faults, resuming and the data")
    life.add_argument("--resume", metavar="RUN_DIR", help="run only the cells missing from RUN_DIR/cells.jsonl "
                      "(same scenario and settings), then rebuild its report")
    life.add_argument("--verify-data", action="store_true",
                      help="check every byte of the datasets against their manifests (default: sizes and a "
                           "sampled checksum)")
    life.add_argument("--regenerate", action="store_true", help="write the datasets again (damaged data)")
    life.add_argument("--scale", choices=("full",), help="full: a CC3M-size dataset (3,318,333 samples) of "
                      "embeddings and captions, for --workload features")
    runsetup.add_data_options(p.add_argument_group("your own data"))
    depth = p.add_argument_group("measurement depth")
    depth.add_argument("--cache-state", choices=("as-is", "warm", "cold"), default="as-is",
                       help="page cache before each cell: cold drops the dataset's files (posix_fadvise), "
                            "warm pre-reads them (default: as-is)")
    depth.add_argument("--decompose", action="store_true",
                       help="per cell, also measure compute alone and the pipeline warm and cold")
    depth.add_argument("--loader-only", action="store_true",
                       help="time each storage's read path alone (no training, no DataLoader), warm and cold, "
                            "against a RAM gather and the first article's per-row h5py reads; writes loader.jsonl")
    depth.add_argument("--profile", action="store_true",
                       help="torch.profiler traces per cell and rank under RUN_DIR/traces/")
    gate = p.add_argument_group("repeats, baselines and the CI gate")
    gate.add_argument("--repeats", type=int, default=1, help="run every cell N times, interleaved")
    gate.add_argument("--save-baseline", type=Path, metavar="FILE", help="write this run as a baseline")
    gate.add_argument("--baseline", type=Path, metavar="FILE",
                      help="compare with a baseline; exit 1 on a significant regression, 3 if not comparable")
    add_compare_options(gate)
    add_what_if_option(p)
    return p


def add_debug_option(parser) -> None:
    parser.add_argument("--debug", action="store_true",
                        help="on an error, print its traceback instead of one line (same exit code)")


def add_compare_options(group) -> None:
    group.add_argument("--raw", action="store_true",
                       help="compare raw samples/s instead of samples/s relative to the machine probe")
    group.add_argument("--min-effect", type=float, default=0.05, help="smallest change that counts (0.05)")
    group.add_argument("--alpha", type=float, default=0.05, help="significance level of the rank test")
    group.add_argument("--strict", action="store_true",
                       help="a cell with too few repeats for the rank test to reach alpha (verdict "
                            "inconclusive) fails the gate (exit 1) instead of a warning")


def add_what_if_option(parser) -> None:
    parser.add_argument("--what-if-cores", type=float, metavar="N",
                        help="add a modelled column: samples/s predicted with N loader cores per rank "
                             "(world size x min(device rate, N / loader CPU s per sample))")


def check_what_if(value: float | None) -> None:
    if value is not None and not value > 0:
        raise UsageError(f"--what-if-cores = {value:g} must be a positive number of cores per rank")


def cmd_list() -> int:
    rows = scenario.describe_all()
    width = max(len(name) for name, _ in rows)
    for name, description in rows:
        print(f"{name:<{width}}  {description}")
    return EXIT_OK


def cmd_self_test() -> int:
    from harness import selftest

    rows = selftest.run()
    print(selftest.render(rows))
    return EXIT_OK if all(r["ok"] for r in rows) else EXIT_REGRESSION


def device_name(sc: scenario.Scenario, device: str) -> str:
    """The real device: on CUDA the GPUs' name (names joined with "+" when they differ), on an emulated run
    "<accelerator> (emulated)"."""
    if device == "cuda":
        import torch

        names = dict.fromkeys(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
        return "+".join(names) or "cuda"
    return f"{sc.accelerator.name} (emulated)"


def comparable_of(sc: scenario.Scenario, device: str, cache_state: str = "as-is",
                  name: str | None = None) -> dict:
    """What a baseline and a run must share to be compared (harness.compare). `name`: the device's name
    (default: `device_name`)."""
    t = sc.training
    return {"dataset_key": sc.dataset.key(), "world_size": sc.world_size, "workload": t.workload,
            "batch_size": t.batch_size, "accelerator": sc.accelerator.name, "emulated": device != "cuda",
            "device": name or device_name(sc, device), "image_size": t.image_size, "steps": t.steps,
            "epochs": t.epochs, "warmup_steps": t.warmup_steps, "workers": t.workers,
            "prefetch_factor": t.prefetch_factor, "cache_state": cache_state, "decoder": t.decoder,
            **({"gpu": gpuinfo.comparability_key()} if device == "cuda" else {})}


RUN_FILES = ("env.json", "probe.jsonl", "cells.jsonl")


def run_as_baseline(run_dir: Path, role: str = "run") -> dict:
    """A run directory as a baseline-shaped dict; a one-line BaselineError (exit 3) when it is missing,
    incomplete (no env.json, probe.jsonl or cells.jsonl) or unreadable."""
    where = f"{role} {run_dir}"
    if not Path(run_dir).is_dir():
        raise compare.BaselineError(f"{where} is not a directory; pass a run directory under results/")
    missing = [name for name in RUN_FILES if not (Path(run_dir) / name).is_file()]
    if missing:
        raise compare.BaselineError(f"{where} is incomplete (no {', '.join(missing)}); pass a finished run "
                                    f"directory under results/")
    try:
        env, cells = results.read_env(run_dir), results.read_results(run_dir)
        if not cells:
            raise ValueError(f"{run_dir}/cells.jsonl is empty")
        lacking = [k for k in ("comparable", "scenario") if k not in env]
        if lacking:
            raise ValueError(f"{run_dir}/env.json lacks {', '.join(lacking)} (written by an older harness?)")
        return compare.build_baseline(cells, env, results.read_probe(run_dir), env["comparable"],
                                      env["scenario"])
    except ValueError as err:  # results.ResultsError included
        raise compare.BaselineError(f"{where} cannot be compared: {err}") from None


def load_plugins(modules: list[str]) -> None:
    from strategies import registry

    for module in modules:
        try:
            registry.load_plugin(module)
        except ImportError as err:
            raise UsageError(f"--plugin {module}: cannot import ({err}); check the module name and PYTHONPATH")


def spawn_ranks(config: launch.LaunchConfig, env: dict) -> bool:
    """Run every cell in spawned ranks, watched: a cell whose rank dies or hangs is recorded as failed and
    fresh ranks go on; False when a cell failed so (exit 1)."""
    data_paths, failures = launch.spawn(config)
    env["dataset_gb"] = launch.dataset_gb(data_paths)
    results.write_json(config.run_dir / "env.json", env)
    if failures:
        print(f"run_bench.py: {len(failures)} cell(s) failed when a rank died or hung; the other cells ran:\n  "
              + "\n  ".join(failures), file=sys.stderr)
    return not failures


def finish_run(args: argparse.Namespace, run_dir: Path, env: dict, baseline: dict | None, ok: bool) -> int:
    """The report from cells.jsonl, the sampler contract, and the baseline (saved and/or compared)."""
    cells_done: list[CellResult] = results.read_results(run_dir)
    print(report.write_all(run_dir, cells_done, env, what_if_cores=args.what_if_cores))
    code = EXIT_OK if ok else EXIT_REGRESSION
    broken = [c.cell for c in cells_done if not c.contract_ok]
    if broken:
        print(f"run_bench.py: the sampler contract is broken in {len(broken)} cell(s): {'; '.join(broken)}",
              file=sys.stderr)
        code = EXIT_REGRESSION
    if args.save_baseline or baseline is not None:
        current = run_as_baseline(run_dir)
        if args.save_baseline:
            compare.save_baseline(current, args.save_baseline)
            print(f"baseline written: {args.save_baseline}", file=sys.stderr)
        if baseline is not None:
            code = max(code, show_comparison(compare.compare(current, baseline, args.raw, args.min_effect,
                                                             args.alpha, args.strict),
                                             run_dir / "comparison.md"))
    print(f"\nresults: {run_dir}", file=sys.stderr)
    return code


def cmd_loader_only(args: argparse.Namespace, sc: scenario.Scenario) -> int:
    """--loader-only: each storage's read path alone, beside a RAM gather and the article's per-row reads."""
    from harness import loaderonly

    run_dir = results.new_run_dir(args.out, f"{sc.name}-loader")
    states = loaderonly.CACHE_STATES if args.cache_state == "as-is" else (args.cache_state,)
    loaderonly.run(sc, args.data_dir, run_dir, states, progress=not args.quiet)
    print(f"\nresults: {run_dir}", file=sys.stderr)
    return EXIT_OK


def cmd_run(args: argparse.Namespace, argv: list[str]) -> int:
    load_plugins(args.plugin)
    if args.repeats < 1:
        raise UsageError(f"--repeats = {args.repeats} must be a positive integer")
    check_what_if(args.what_if_cores)
    overrides = {k: getattr(args, k) for k in scenario.OVERRIDES}
    if args.scale == "full" and args.samples is None and args.data is None:
        overrides["samples"] = CC3M_SAMPLES
    torchrun = "RANK" in os.environ and "WORLD_SIZE" in os.environ
    if torchrun:
        overrides["world_size"] = int(os.environ["WORLD_SIZE"])
    sc = with_source(args, scenario.load(args.scenario, overrides))  # --data, [dataset] source
    if args.scale == "full":
        sc = full_scale(sc)
    device = launch.resolve_device(args.device, int(os.environ.get("LOCAL_WORLD_SIZE", sc.world_size)))
    cells = select(expand(sc), args.only, args.exclude)
    if args.dry_run:
        for i, cell in enumerate(cells, 1):
            print(f"{i:3d}  {cell.id}")
        print(f"{len(cells)} cells x {args.repeats} repeats x {sc.world_size} ranks ({device})", file=sys.stderr)
        return EXIT_OK
    runsetup.scan_source(sc, args.data_dir, progress=not args.quiet)  # an imported source: its size, corrupt JPEGs
    if args.loader_only:
        return cmd_loader_only(args, sc)
    comparable = comparable_of(sc, device, args.cache_state)
    baseline = compare.load_baseline(args.baseline) if args.baseline else None
    if baseline is not None:  # fail fast, before anything runs
        compare.check_comparable({"scenario": sc.name, "comparable": comparable}, baseline)
    rank = int(os.environ.get("RANK", 0))
    settings = resume.settings_of(args, sc, cells, device, comparable)
    run_dir, env = (args.out, None) if rank != 0 else resume.open_run_dir(args, argv, sc, device, comparable,
                                                                           len(cells), settings)
    config = launch.LaunchConfig(sc, cells, run_dir, args.data_dir, device, plugins=args.plugin,
                                 progress=not args.quiet, cache_state=args.cache_state,
                                 decompose=args.decompose, profile=args.profile, repeats=args.repeats,
                                 device_name=comparable["device"], regenerate=args.regenerate,
                                 verify_data=args.verify_data)
    signal.signal(signal.SIGTERM, supervisor.raise_interrupted)
    try:
        if not torchrun:
            return finish_run(args, run_dir, env, baseline, spawn_ranks(config, env))
        return run_torchrun_rank(args, config, env, baseline, rank)
    except (KeyboardInterrupt, supervisor.Interrupted) as err:
        code = err.code if isinstance(err, supervisor.Interrupted) else 130
        return resume.stopped(args, run_dir, env, code, torchrun) if rank == 0 else code


def run_torchrun_rank(args: argparse.Namespace, config: launch.LaunchConfig, env: dict | None,
                      baseline: dict | None, rank: int) -> int:
    """Under torchrun: no respawn. A failure ends the run with every finished cell written and the command
    that resumes it."""
    if rank == 0 and args.resume:
        config.plan = supervisor.remaining(config, config.full_plan())
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
    env["dataset_gb"] = launch.dataset_gb(data_paths)
    results.write_json(config.run_dir / "env.json", env)
    return finish_run(args, config.run_dir, env, baseline, True)


def show_comparison(comparison: compare.Comparison, markdown_path: Path | None) -> int:
    print("\n" + compare.render(comparison, "text"))
    for warning in comparison.warnings:
        print(f"WARNING: {warning}", file=sys.stderr)
    if markdown_path is not None:
        markdown_path.write_text(compare.render(comparison, "markdown") + "\n")
    return comparison.exit_code


def cmd_report(argv: list[str]) -> int:
    p = OneLineParser(prog="run_bench.py report", description="Rebuild the tables, summary.csv, report.md "
                      "and plots of a run from its cells.jsonl alone.")
    p.add_argument("run_dir", type=Path)
    p.add_argument("--with-1x", type=Path, metavar="RUN_DIR",
                   help="a one-rank run of the same matrix, for the scaling-efficiency table")
    add_what_if_option(p)
    add_debug_option(p)
    args = p.parse_args(argv)
    check_what_if(args.what_if_cores)
    try:
        cells = read_run(args.run_dir)
        cells_1x = read_run(args.with_1x) if args.with_1x else None
        env = results.read_env(args.run_dir)
    except results.ResultsError as err:
        raise UsageError(str(err)) from None
    print(report.write_all(args.run_dir, cells, env, cells_1x, what_if_cores=args.what_if_cores))
    return EXIT_OK


def read_run(run_dir: Path) -> list[CellResult]:
    """A run directory's results; a UsageError when it has none."""
    if not Path(run_dir).is_dir():
        raise UsageError(f"{run_dir} is not a directory; pass a run directory under results/")
    cells = results.read_results(run_dir)
    if not cells:
        raise UsageError(f"{run_dir}/cells.jsonl is missing or empty; pass a run directory under results/")
    return cells


def cmd_compare(argv: list[str]) -> int:
    p = OneLineParser(prog="run_bench.py compare", description="Compare run B with run A, cell by cell.")
    p.add_argument("run_a", type=Path)
    p.add_argument("run_b", type=Path)
    p.add_argument("--markdown", action="store_true", help="print markdown (for a pull-request comment)")
    add_compare_options(p)
    add_debug_option(p)
    args = p.parse_args(argv)
    baseline = run_as_baseline(args.run_a, "run A (the baseline)")
    current = run_as_baseline(args.run_b, "run B")
    comparison = compare.compare(current, baseline, args.raw, args.min_effect, args.alpha, args.strict)
    if args.markdown:
        print(compare.render(comparison, "markdown"))
        return comparison.exit_code
    return show_comparison(comparison, None)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    debug = "--debug" in argv
    try:
        if argv and argv[0] == "report":
            return cmd_report(argv[1:])
        if argv and argv[0] == "compare":
            return cmd_compare(argv[1:])
        resume_dir = None
        if any(a == "--resume" or a.startswith("--resume=") for a in argv):
            resume_dir, argv = resume.resume_argv(argv)
        args = build_parser().parse_args(argv)
        args.resume = resume_dir
        if args.list:
            return cmd_list()
        if args.self_test:
            return cmd_self_test()
        if not args.scenario:
            raise UsageError("give --scenario NAME (see --list), --list, --self-test, report or compare")
        code = cmd_run(args, argv)
        if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
            # a torchrun rank: its work is written; leave without C++ static destructors, where torch's
            # background threads sometimes abort ("terminate called without an active exception")
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        return code
    except UsageError as err:
        return _fail(err, EXIT_USAGE, debug, f"run_bench.py: error: {err}")
    except compare.BaselineError as err:
        return _fail(err, EXIT_BASELINE, debug, f"run_bench.py: error: {err}")
    except Exception as err:  # a bug: say so in one line, exit 2 (never 1, which means a regression)
        where = _origin(err)
        return _fail(err, EXIT_USAGE, debug,
                     f"run_bench.py: internal error (a bug in the harness): {type(err).__name__}: "
                     f"{' '.join(str(err).split())[:200]}{where}; rerun with --debug for the traceback")


def _fail(err: BaseException, code: int, debug: bool, line: str) -> int:
    """Print one line on stderr (with --debug: the whole traceback) and return the exit code."""
    if debug:
        traceback.print_exception(err, file=sys.stderr)
    else:
        print(line, file=sys.stderr)
    return code


def _origin(err: BaseException) -> str:
    """" at file:line" of the innermost frame of an exception's traceback ("" without one)."""
    tb = err.__traceback__
    if tb is None:
        return ""
    while tb.tb_next is not None:
        tb = tb.tb_next
    return f" at {Path(tb.tb_frame.f_code.co_filename).name}:{tb.tb_lineno}"
