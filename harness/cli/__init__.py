"""The command line, the only place that parses it: harness.cli.parsers (argparse) reads it,
harness.cli.fromargs turns it into one frozen, typed request per command (harness.config.request, or the
command's own `Request`), settled once, and this module dispatches the request to its command.

    run_bench.py --scenario NAME [options]     run a scenario's matrix (the default command)
    run_bench.py list        (or --list)       list the scenarios
    run_bench.py self-test   (or --self-test)  check the harness's own figures on a calibrated workload
    run_bench.py report RUN_DIR                rebuild every table and plot from cells.jsonl alone
    run_bench.py compare RUN_A RUN_B           compare run B with run A, cell by cell
    run_bench.py check-predictions --scenario NAME   (or --scenario NAME --check-predictions) the target model
    run_bench.py check-capacity --scenario NAME      how many accelerators this host keeps at AU >= 90%
    run_bench.py target-report RUN_DIR               the stage and target tables of any run directory
    run_bench.py oomcheck [--real]                   an OOM on one rank neither hangs nor crashes the other
    run_bench.py ab-gate --parent DIR                this commit against its parent, interleaved (CI's gate)
    run_bench.py gate-precheck BASELINE              may the baseline be of this machine (0) or not (3)
    run_bench.py history ACTION ...                  the history store: add, list, show, compare, gate, steps, html

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

import os
import sys
import traceback
from pathlib import Path

from harness.cli import parsers
from harness.cli.parsers import build_parser
from harness.cli.fromargs import bench_request, check_predictions_request_of, check_what_if, request_of, resume_argv
from harness.commands import (
    ab_gate,
    bench,
    check_capacity,
    check_predictions,
    compare_runs,
    history,
    list_scenarios,
    oomcheck,
    rebuild_report,
    target_report,
)
from harness.errors import EXIT_BASELINE, EXIT_OK, EXIT_REGRESSION, EXIT_USAGE, UsageError
from harness.results import rundir
from harness.results.baseline import BaselineError
from harness.results.rundir import ResultsError

__all__ = ["bench_request", "build_parser", "main", "resume_argv"]


def cmd_self_test() -> int:
    from harness.commands import selftest

    rows = selftest.run()
    print(selftest.render(rows))
    return EXIT_OK if all(r["ok"] for r in rows) else EXIT_REGRESSION


def cmd_report(argv: list[str]) -> int:
    ns = parsers.report_parser().parse_args(argv)
    check_what_if(ns.what_if_cores)
    return rebuild_report.main(rebuild_report.Request(ns.run_dir, ns.with_1x, ns.what_if_cores, ns.target))


def cmd_compare(argv: list[str]) -> int:
    return compare_runs.main(request_of(compare_runs.CompareRequest, parsers.compare_parser().parse_args(argv)))


SUBCOMMANDS = {  # name: (its Request class, its main, one line of help)
    "history": (history.HistoryRequest, history.main,
                "the history store: every run per commit and machine, its queries, a gate against the last "
                "comparable runs, change points, a static HTML dashboard (docs/history.md)"),
    "ab-gate": (ab_gate.AbGateRequest, ab_gate.ab_gate_request,
                "this commit's tree against its parent's, single-repeat runs interleaved on this machine, compared "
                "on the gate metric; exit 1 only on a significant regression"),
    "gate-precheck": (ab_gate.GatePrecheckRequest, ab_gate.precheck_request,
                      "0 when a baseline may be of this machine (CPU model, count, cores allowed), else 3"),
    "check-predictions": (check_predictions.Request, check_predictions.main,
                          "the target model (nothing fitted) calibrated on one configuration of a scenario, the "
                          "configurations that each change one thing and the 1-CPU pairings predicted and measured "
                          "here; writes predictions.jsonl"),
    "check-capacity": (check_capacity.Request, check_capacity.main,
                       "how many accelerators this host keeps at AU >= 90%: runs at 1, 2 and 4 ranks per workload "
                       "against the model from the 1-rank run; exit 1 where they differ; writes capacity.jsonl"),
    "target-report": (target_report.Request, target_report.main,
                      "the per-stage table, plots/stages.png and, with a target, each cell's prediction there and "
                      "the configuration to use, from a run directory alone"),
    "oomcheck": (oomcheck.Request, oomcheck.main,
                 "an OOM on one rank of a 2-rank DDP run must neither hang nor crash the other"),
}


def cmd_subcommand(name: str, argv: list[str]) -> int:
    """`run_bench.py NAME ...`: parsed by its own parser into the command's Request, then its main."""
    request_class, command, text = SUBCOMMANDS[name]
    return command(request_of(request_class, parsers.subcommand_parser(name, text).parse_args(argv)))


def load_plugins(modules) -> None:
    """--plugin MODULE, once, before any command runs (the spawned ranks import them again themselves)."""
    from strategies import registry

    for module in modules:
        try:
            registry.load_plugin(module)
        except registry.PluginError as err:
            raise UsageError(f"--plugin {module}: {err}") from None


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
        return check_predictions.main(check_predictions_request_of(request))
    recorded = ns.history and request.rank == 0 and not (request.dry_run or request.loader_only)
    before = _prepare(ns.history, request.out) if recorded else set()
    code = bench.main(request)
    if recorded:
        code = _record(ns.history, request, before, code)
    if request.torchrun is not None:
        # a torchrun rank: its work is written; leave without C++ static destructors, where torch's
        # background threads sometimes abort ("terminate called without an active exception")
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def _run_dirs(out: Path) -> set[Path]:
    return set(out.iterdir()) if out.is_dir() else set()


def _prepare(store: Path, out: Path) -> set[Path]:
    """Before anything is measured: the store opens (a newer or damaged one is one line, exit 2); the run
    directories already under --out."""
    history.database.open_store(store).close()
    return _run_dirs(out)


def _record(store: Path, request, before: set[Path], code: int) -> int:
    """--history FILE (or DLBENCH_HISTORY): the run just written adds itself; a failure to add is exit 2 at
    worst, never 1, and the run directory stays."""
    made = sorted(d for d in _run_dirs(request.out) - before if (d / "cells.jsonl").is_file()
                  and rundir.read_env(d).argv == list(request.argv))  # this run's, not a neighbour's
    run_dir = request.resume or (made[-1] if made else None)
    if run_dir is None:
        return code
    added = history.record(store, run_dir)
    return code if added == EXIT_OK or code != EXIT_OK else added


COMMANDS = {"report": cmd_report, "compare": cmd_compare, "list": lambda argv: cmd_bench(["--list", *argv]),
            "self-test": lambda argv: cmd_bench(["--self-test", *argv]),
            **{name: (lambda argv, name=name: cmd_subcommand(name, argv)) for name in SUBCOMMANDS}}


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
