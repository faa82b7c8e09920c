"""Command line: the only module that parses it. Each command's options become one frozen, typed request
(harness.config.request, or the command's own `Request`), settled once here, and the command receives that.

    run_bench.py --scenario NAME [options]     run a scenario's matrix (the default command)
    run_bench.py list        (or --list)       list the scenarios
    run_bench.py self-test   (or --self-test)  check the harness's own figures on a calibrated workload
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
import sys
import traceback
from pathlib import Path

from harness.commands import bench, compare_runs, list_scenarios, rebuild_report, resume
from harness.config import scenario
from harness.config.request import BenchRequest, DataOptions, GateOptions, Overrides, Torchrun
from harness.config.runconfig import ORDERS
from harness.data.importer import LAYOUTS
from harness.errors import EXIT_BASELINE, EXIT_OK, EXIT_REGRESSION, EXIT_USAGE, UsageError
from harness.results.baseline import BaselineError
from harness.results.rundir import ResultsError

REPO = Path(__file__).resolve().parent.parent


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
    add_run_options(p)
    return p


def add_run_options(p: argparse.ArgumentParser) -> None:
    """The options of a run's life, its depth and its gate."""
    life = p.add_argument_group("faults, resuming and the data")
    life.add_argument("--resume", metavar="RUN_DIR", help="run only the cells missing from RUN_DIR/cells.jsonl "
                      "(same scenario and settings), then rebuild its report")
    life.add_argument("--verify-data", action="store_true",
                      help="check every byte of the datasets against their manifests (default: sizes and a "
                           "sampled checksum)")
    life.add_argument("--regenerate", action="store_true", help="write the datasets again (damaged data)")
    life.add_argument("--scale", choices=("full",), help="full: a CC3M-size dataset (3,318,333 samples) of "
                      "embeddings and captions, for --workload features")
    add_data_options(p.add_argument_group("your own data"))
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
    depth.add_argument("--check-predictions", action="store_true",
                       help="calibrate the target model on one configuration of the scenario, predict 8 that "
                            "each change one thing, measure them here; writes predictions.jsonl "
                            "(docs/prediction.md)")
    gate = p.add_argument_group("repeats, baselines and the CI gate")
    gate.add_argument("--repeats", type=int, default=1, help="run every cell N times, interleaved")
    gate.add_argument("--order", choices=ORDERS, default="random",
                      help="random (default): each repeat visits the cells in a fresh order drawn from a "
                           "recorded seed; fixed: the matrix's order every time")
    gate.add_argument("--budget", type=duration, metavar="DURATION", default=0.0,
                      help="after the planned repeats, keep visiting while an effect or the fastest cell is "
                           "still open, until this much time (e.g. 300, 90s, 10m, 1h) has passed")
    gate.add_argument("--order-seed", type=int, metavar="N",
                      help="the seed of the random order (default: drawn, and recorded in env.json)")
    gate.add_argument("--save-baseline", type=Path, metavar="FILE", help="write this run as a baseline")
    gate.add_argument("--baseline", type=Path, metavar="FILE",
                      help="compare with a baseline; exit 1 on a significant regression, 3 if not comparable")
    add_compare_options(gate)
    add_what_if_option(p)
    add_target_option(p)


def add_data_options(group) -> None:
    group.add_argument("--data", type=Path, metavar="PATH",
                       help="benchmark your own dataset: a folder img2dataset wrote (files, webdataset or "
                            "parquet output) or a folder of .jpg + same-named .txt captions; imported once per "
                            "storage into --data-dir (--samples N: only the first N samples)")
    group.add_argument("--data-format", choices=LAYOUTS, help="the layout of --data (default: detected)")
    group.add_argument("--strict-data", action="store_true",
                       help="a corrupt image in --data is an error (default: skipped and counted)")


def duration(text: str) -> float:
    """Seconds from "300", "90s", "10m" or "1h" (argparse turns the ValueError into one line, exit 2)."""
    units = {"s": 1, "m": 60, "h": 3600}
    number, unit = (text[:-1], units[text[-1]]) if text and text[-1] in units else (text, 1)
    seconds = float(number) * unit
    if not seconds > 0:
        raise ValueError(text)
    return seconds


def alpha(text: str) -> float:
    """A significance level: a number strictly between 0 and 1 (argparse prints the message, exit 2)."""
    value = float(text)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"{text} must be a number strictly between 0 and 1 (e.g. 0.05)")
    return value


def min_effect(text: str) -> float:
    """The smallest relative change that counts: a finite number >= 0."""
    value = float(text)
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text} must be a relative change >= 0 (e.g. 0.05 for 5%)")
    return value


def add_debug_option(parser) -> None:
    parser.add_argument("--debug", action="store_true",
                        help="on an error, print its traceback instead of one line (same exit code)")


def add_compare_options(group) -> None:
    group.add_argument("--gate-metric", choices=("throughput", "cpu"), default="throughput",
                       help="throughput (default): samples/s normalised by the machine probe; cpu: the loader's and "
                            "the rank's CPU seconds per sample (steadier on a shared runner)")
    group.add_argument("--raw", action="store_true",
                       help="compare raw samples/s instead of samples/s relative to the machine probe")
    group.add_argument("--min-effect", type=min_effect, default=0.05,
                       help="smallest relative change that counts, >= 0 (0.05: 5%%)")
    group.add_argument("--alpha", type=alpha, default=0.05,
                       help="significance level of the rank test, in (0, 1) (0.05)")
    group.add_argument("--strict", action="store_true",
                       help="a cell with too few repeats for the rank test to reach alpha (verdict "
                            "inconclusive) fails the gate (exit 1) instead of a warning")


def add_what_if_option(parser) -> None:
    parser.add_argument("--what-if-cores", type=float, metavar="N",
                        help="add a modelled column: samples/s predicted with N loader cores per rank "
                             "(world size x min(device rate, N / (loader + rank CPU s per sample), workers / "
                             "loader CPU s per sample))")


def add_target_option(parser) -> None:
    parser.add_argument("--target", type=Path, metavar="FILE",
                        help="a TOML file with a [target] table: the hardware to predict each cell on "
                             "(docs/prediction.md); default: the scenario's [target], if any")


def check_what_if(value: float | None) -> None:
    if value is not None and not value > 0:
        raise UsageError(f"--what-if-cores = {value:g} must be a positive number of cores per rank")


def cmd_self_test() -> int:
    from harness.commands import selftest

    rows = selftest.run()
    print(selftest.render(rows))
    return EXIT_OK if all(r["ok"] for r in rows) else EXIT_REGRESSION


def cmd_report(argv: list[str]) -> int:
    p = OneLineParser(prog="run_bench.py report", description="Rebuild the tables, summary.csv, report.md "
                      "and plots of a run from its cells.jsonl alone.")
    p.add_argument("run_dir", type=Path)
    p.add_argument("--with-1x", type=Path, metavar="RUN_DIR",
                   help="a one-rank run of the same matrix, for the scaling-efficiency table")
    add_what_if_option(p)
    add_target_option(p)
    add_debug_option(p)
    ns = p.parse_args(argv)
    check_what_if(ns.what_if_cores)
    return rebuild_report.main(rebuild_report.Request(ns.run_dir, ns.with_1x, ns.what_if_cores, ns.target))


def cmd_compare(argv: list[str]) -> int:
    p = OneLineParser(prog="run_bench.py compare", description="Compare run B with run A, cell by cell.")
    p.add_argument("run_a", type=Path)
    p.add_argument("run_b", type=Path)
    p.add_argument("--markdown", action="store_true", help="print markdown (for a pull-request comment)")
    add_compare_options(p)
    add_debug_option(p)
    return compare_runs.main(p.parse_args(argv))


def bench_request(ns: argparse.Namespace, argv: list[str], resume_dir: Path | None) -> BenchRequest:
    """The run's request: every option typed, the order seed and the torchrun identity settled."""
    if ns.repeats < 1:
        raise UsageError(f"--repeats = {ns.repeats} must be a positive integer")
    check_what_if(ns.what_if_cores)
    seed = ns.order_seed
    if seed is None and resume_dir is not None:
        seed = resume.recorded_order_seed(resume_dir)
    if seed is None:
        seed = int.from_bytes(os.urandom(4), "little")  # drawn, then recorded in env.json
    return BenchRequest(
        scenario=ns.scenario, argv=tuple(argv), order_seed=seed,
        overrides=Overrides(**{k: getattr(ns, k) for k in scenario.OVERRIDES}),
        data=DataOptions(ns.data, ns.data_format, ns.strict_data, ns.scale),
        gate=GateOptions(ns.baseline, ns.save_baseline, ns.gate_metric, ns.raw, ns.min_effect, ns.alpha, ns.strict),
        device=ns.device, data_dir=ns.data_dir, out=ns.out, plugins=tuple(ns.plugin), quiet=ns.quiet,
        only=tuple(ns.only), exclude=tuple(ns.exclude), dry_run=ns.dry_run, resume=resume_dir,
        verify_data=ns.verify_data, regenerate=ns.regenerate, cache_state=ns.cache_state, decompose=ns.decompose,
        loader_only=ns.loader_only, profile=ns.profile, repeats=ns.repeats, order=ns.order, budget_s=ns.budget,
        what_if_cores=ns.what_if_cores, target=ns.target, torchrun=Torchrun.from_env())


def load_plugins(modules) -> None:
    """--plugin MODULE, once, before any command runs (the spawned ranks import them again themselves)."""
    from strategies import registry

    for module in modules:
        try:
            registry.load_plugin(module)
        except registry.PluginError as err:
            raise UsageError(f"--plugin {module}: {err}") from None


def resume_argv(argv: list[str], parser: argparse.ArgumentParser) -> tuple[Path, list[str]]:
    """(RUN_DIR, the command line to run): the recorded one when only free options were given; a whole
    command line (with --scenario) as given (its settings are checked against the run's later); other
    options without --scenario must not change the recorded command line: a UsageError names each option
    that differs."""
    rest, run_dir, i = [], None, 0
    while i < len(argv):
        if argv[i] == "--resume" and i + 1 < len(argv):
            run_dir, i = Path(argv[i + 1]), i + 2
            continue
        if argv[i].startswith("--resume="):
            run_dir = Path(argv[i].split("=", 1)[1])
        else:
            rest.append(argv[i])
        i += 1
    if run_dir is None:
        raise UsageError("--resume needs a run directory: --resume results/<run>")
    recorded = list(resume.read_run_env(run_dir).argv)
    if any(a not in resume.FREE_OPTIONS for a in rest):
        if any(a == "--scenario" or a.startswith("--scenario=") for a in rest):
            return run_dir, rest
        _same_options(run_dir, parser, recorded, rest)
    return run_dir, recorded + [a for a in rest if a not in recorded]


def _same_options(run_dir: Path, parser, recorded: list[str], given: list[str]) -> None:
    """A UsageError naming the options in ``given`` that change the run's recorded command line."""
    before, after = parser.parse_args(recorded), parser.parse_args(recorded + given)
    free = {o.lstrip("-").replace("-", "_") for o in resume.FREE_OPTIONS}
    differ = [k for k in vars(after) if k not in free and getattr(before, k, None) != getattr(after, k)]
    if differ:
        what = "; ".join(f"--{k.replace('_', '-')} {_shown(getattr(after, k))} (the run's: "
                         f"{_shown(getattr(before, k, None))})" for k in differ)
        raise UsageError(f"--resume {run_dir}: these options differ from the run's: {what}; resume with just "
                         f"--resume {run_dir} (free to add: {', '.join(sorted(resume.FREE_OPTIONS))}), or start "
                         f"a new run with them")


def _shown(value) -> str:
    if value is None:
        return "not given, the scenario's"
    if isinstance(value, list):
        return " ".join(map(str, value)) or "none"
    return str(value)


def cmd_bench(argv: list[str]) -> int:
    """The default command (and its mode flags --list, --self-test, --check-predictions)."""
    resume_dir = None
    if any(a == "--resume" or a.startswith("--resume=") for a in argv):
        resume_dir, argv = resume_argv(argv, build_parser())
    ns = build_parser().parse_args(argv)
    if ns.list:
        return list_scenarios.main()
    if ns.self_test:
        return cmd_self_test()
    if not ns.scenario:
        raise UsageError("give --scenario NAME (see --list), --list, --self-test, report or compare")
    request = bench_request(ns, argv, resume_dir)
    load_plugins(request.plugins)
    if ns.check_predictions:
        return cmd_check_predictions_of(request)
    code = bench.main(request)
    if request.torchrun is not None:
        # a torchrun rank: its work is written; leave without C++ static destructors, where torch's
        # background threads sometimes abort ("terminate called without an active exception")
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def cmd_check_predictions_of(request: BenchRequest) -> int:
    """--scenario NAME --check-predictions: the prediction check on the run's scenario and data."""
    from harness.commands import check_predictions

    return check_predictions.run(request.scenario, request.data_dir, request.out, quiet=request.quiet)


COMMANDS = {"report": cmd_report, "compare": cmd_compare, "list": lambda argv: cmd_bench(["--list", *argv]),
            "self-test": lambda argv: cmd_bench(["--self-test", *argv])}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    debug = "--debug" in argv
    try:
        if argv and argv[0] in COMMANDS:
            return COMMANDS[argv[0]](argv[1:])
        return cmd_bench(argv)
    except UsageError as err:
        return _fail(err, EXIT_USAGE, debug, f"run_bench.py: error: {err}")
    except BaselineError as err:
        return _fail(err, EXIT_BASELINE, debug, f"run_bench.py: error: {err}")
    except ResultsError as err:  # a damaged file of a run directory (cells.jsonl, env.json): the user's to fix
        return _fail(err, EXIT_USAGE, debug, f"run_bench.py: error: {err}")
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
