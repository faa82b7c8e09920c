"""The command line, the only place that parses it: harness.cli.parsers (argparse) reads it,
harness.cli.fromargs turns it into one frozen, typed request per command (harness.config.request,
or the command's own `Request`), settled once, and this module dispatches the request to its
command.

    run_bench.py --scenario NAME [options]     run a scenario's matrix (the default command)
    run_bench.py list        (or --list)       list the scenarios
    run_bench.py self-test   (or --self-test)  the harness's own figures on a calibrated workload
    run_bench.py report RUN_DIR                rebuild every table and plot from cells.jsonl alone
    run_bench.py compare RUN_A RUN_B           compare run B with run A, cell by cell
    run_bench.py check-predictions --scenario NAME
                                               the target model (or --scenario NAME
                                               --check-predictions)
    run_bench.py check-capacity --scenario NAME
                                               how many accelerators this host keeps at AU >= 90%
    run_bench.py check-remote [--bandwidths MB_S ...]
                                               the target model's storage bounds on the shaped
                                               store (root)
    run_bench.py check-resume --scenario NAME  a restart's time to the first batch, a resume's
                                               repeats and drops
    run_bench.py target-report RUN_DIR         the stage and target tables of any run directory
    run_bench.py oomcheck [--real]             an OOM on one rank hangs or crashes no other rank
    run_bench.py ab-gate --parent DIR          this commit against its parent, interleaved (CI)
    run_bench.py gate-precheck BASELINE        may the baseline be of this machine (0) or not (3)
    run_bench.py history ACTION ...            the history store: add, list, show, compare, gate,
                                               steps, html
    run_bench.py ci-history --gate-exit N      after the CI gate: the history gate on a CI cache

Every command also takes --debug: an error then prints its full traceback instead of one line; the
exit code stays the same (2 or 3), so --debug in CI never turns an error into "1, a regression".

Exit codes:
    0  success, nothing regressed
    1  a significant regression (or a cell that errored where the baseline had a result), a
       broken sampler contract, a failed self-test or a crashed rank; with --strict also a cell
       whose comparison is inconclusive (too few repeats for the rank test to reach alpha; without
       --strict: exit 0 and one warning line)
    2  a usage or run error: one line on stderr, no traceback. Also any unexpected exception,
       which is a bug of the harness: one line that says so (rerun with --debug for the
       traceback); never 1, so a bug is not taken for a regression
    3  a baseline (or, for `compare`, either run directory) missing, incomplete (no env.json,
       probe.jsonl or cells.jsonl) or not comparable
    4  inconclusive: --self-test's figures missed only in regimes measured while other processes
       used the machine (outside load above 10%), and it stayed so when measured again;
       check-capacity's predicted and measured capacity differ only for workloads with a launch
       under such load; never a FAIL
"""
from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.checks.oom import command as oomcheck
from harness.checks.predictions import capacity_command as check_capacity
from harness.checks.predictions import command as check_predictions
from harness.checks.remote import command as check_remote
from harness.checks.resume import command as check_resume
from harness.cli import parsers
from harness.cli.fromargs import bench_request, check_predictions_request_of, check_what_if, request_of, resume_argv
from harness.cli.parsers import build_parser
from harness.commands import bench, history, list_scenarios, rebuild_report, target_report
from harness.config.request import BenchRequest
from harness.errors import EXIT_BASELINE, EXIT_USAGE, UsageError
from harness.gates import ab_command, ci_command, compare_command, mainrun
from harness.gates import history as history_gate
from harness.results.baselinefile import BaselineError
from harness.results.rundir import ResultsError
from harness.run import resume

__all__ = ["bench_request", "build_parser", "main", "resume_argv"]


@dataclass(frozen=True)
class Command:
    """An entry of the dispatch table: the command's main (its request -> the exit code) and, for a
    command named by the command line's first word, how its request is read from the words after it
    (None: reached from the default command line alone, by its flag)."""

    main: Callable[[Any], int]
    read: Callable[[list[str]], Any] | None = None


def load_plugins(modules) -> None:
    """--plugin MODULE, once, before any command runs (the spawned ranks import them again
    themselves)."""
    from strategies import registry

    for module in modules:
        try:
            registry.load_plugin(module)
        except registry.PluginError as err:
            raise UsageError(f"--plugin {module}: {err}") from None


def read_default(argv: list[str]) -> tuple[str, Any]:
    """The default command line (`--scenario NAME [options]`, or one of its mode flags --list,
    --self-test, --check-predictions): the name of the command it asks for in COMMANDS, and its
    request."""
    resume_dir = None
    if any(a == "--resume" or a.startswith("--resume=") for a in argv):
        resume_dir, argv = resume_argv(argv, build_parser())
    ns = build_parser().parse_args(argv)
    if ns.list:
        return "list", None
    if ns.self_test:
        return "self-test", None
    if not ns.scenario:
        raise UsageError("give --scenario NAME (see --list), --list, --self-test, report or compare")
    request = bench_request(ns, argv, resume_dir)
    if resume_dir is not None:  # the replayed line asks for what the run recorded, before a plugin is imported
        resume.check_replay(resume_dir, request)
    load_plugins(request.plugins)
    if ns.check_predictions:
        return "check-predictions", check_predictions_request_of(request)
    return "bench", (request, ns.history)


def run_bench(given: tuple[BenchRequest, Path | None]) -> int:
    """The main run (harness.commands.bench) with the baseline gate when the request asks for one
    (harness.gates.mainrun), added to the history store when one is given (--history FILE or
    DLBENCH_HISTORY: harness.commands.history.recorded); --loader-only is the loader-only run
    (harness.loaderonly)."""
    request, store = given
    if request.loader_only:
        from harness.loaderonly import command as loaderonly  # h5py, PIL and the article's code: only for this run

        code = loaderonly.main(request)
    else:
        code = history.recorded(store, request, lambda: bench.main(request, mainrun.of(request.gate)))
    if request.torchrun is not None:
        # a torchrun rank: its work is written; leave without C++ static destructors, where torch's
        # background threads sometimes abort ("terminate called without an active exception")
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def self_test(_) -> int:
    from harness.checks.selftest import command as selftest  # the fidelity workload: only for this command

    return selftest.main()


def read_report(argv: list[str]) -> rebuild_report.Request:
    request = request_of(rebuild_report.Request, parsers.subcommand_parser("report").parse_args(argv))
    check_what_if(request.what_if_cores)
    return request


def reader(name: str, request_class) -> Callable[[list[str]], Any]:
    """`run_bench.py NAME ...` read by the command's own parser (harness.cli.parsers.DEFINE) into
    its Request."""
    return lambda argv: request_of(request_class, parsers.subcommand_parser(name).parse_args(argv))


COMMANDS = {  # the one dispatch table: name -> Command
    "bench": Command(run_bench),  # the default command line: run_bench.py --scenario NAME [options]
    "list": Command(lambda _: list_scenarios.main()),  # --list (or the word list)
    "self-test": Command(self_test),  # --self-test (or the word self-test)
    "report": Command(rebuild_report.main, read_report),
    "compare": Command(compare_command.main, reader("compare", compare_command.CompareRequest)),
    "history": Command(lambda r: history.main(r, history_gate.from_request), reader("history", history.HistoryRequest)),
    "ab-gate": Command(ab_command.ab_gate_request, reader("ab-gate", ab_command.AbGateRequest)),
    "ci-history": Command(ci_command.main, reader("ci-history", ci_command.CiHistoryRequest)),
    "gate-precheck": Command(ab_command.precheck_request, reader("gate-precheck", ab_command.GatePrecheckRequest)),
    "check-predictions": Command(check_predictions.main, reader("check-predictions", check_predictions.Request)),
    "check-capacity": Command(check_capacity.main, reader("check-capacity", check_capacity.Request)),
    "check-remote": Command(check_remote.main, reader("check-remote", check_remote.CheckRemoteRequest)),
    "check-resume": Command(check_resume.main, reader("check-resume", check_resume.CheckResumeRequest)),
    "target-report": Command(target_report.main, reader("target-report", target_report.Request)),
    "oomcheck": Command(oomcheck.main, reader("oomcheck", oomcheck.Request)),
}
FLAGS = {"list": "--list", "self-test": "--self-test"}  # a first word that is a flag of the default command line


def read(argv: list[str]) -> tuple[str, Any]:
    """The command a command line asks for (its name in COMMANDS) and its request."""
    word = argv[0] if argv else ""
    if word in FLAGS:
        return read_default([FLAGS[word], *argv[1:]])
    command = COMMANDS.get(word)
    if command is not None and command.read is not None:
        return word, command.read(argv[1:])
    return read_default(argv)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    debug = "--debug" in argv
    try:
        name, request = read(argv)
        return COMMANDS[name].main(request)
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
