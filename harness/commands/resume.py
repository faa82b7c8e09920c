"""--resume RUN_DIR and the ends of a run that stopped early.

A run's env.json records its settings (scenario, the comparable settings, the cells, repeats and measurement
options) and its command line. `--resume RUN_DIR` alone replays that command line; given with other options
they must yield the same settings (else one line, exit 2). The cells and repeats without a line in
cells.jsonl then run (harness.run.supervisor skips the rest), and the report is rebuilt over all of them.
"""
from __future__ import annotations

import dataclasses
import os
import shlex
import sys
from pathlib import Path

from harness.config import runsetup
from harness.errors import UsageError
from harness.report import report
from harness.results import rundir
from harness.results.environment import Environment, utc_now

# options that may change between the first run and its resumption
FREE_OPTIONS = {"--quiet", "--debug", "--verify-data", "--regenerate"}


def settings_of(args, sc, cells, device: str, comparable: dict) -> dict:
    """What a resumed run must share with the run it completes (a fixed order adds nothing: runs made before
    the random order existed resume with --order fixed)."""
    order = {"order": "random", "order_seed": args.order_seed} if args.order == "random" else {}
    return {"scenario": sc.name, "comparable": comparable, "cells": [c.id for c in cells],
            "repeats": args.repeats, "cache_state": args.cache_state, "decompose": args.decompose,
            "profile": args.profile, "plugins": list(args.plugin), "device": device,
            "data_dir": str(Path(args.data_dir).resolve()), **order}


def order_seed(args) -> int:
    """The random order's seed: given, or the resumed run's, or drawn now (then recorded in env.json)."""
    if args.order_seed is not None:
        return args.order_seed
    if args.resume:
        recorded = (read_run_env(args.resume).settings or {}).get("order_seed")
        if recorded is not None:
            return int(recorded)
    return int.from_bytes(os.urandom(4), "little")


def resume_argv(argv: list[str], parser=None) -> tuple[Path, list[str]]:
    """(RUN_DIR, the command line to run): the recorded one when only free options were given; a whole
    command line (with --scenario) as given (its settings are checked against the run's later); other
    options without --scenario must not change the recorded command line (checked with ``parser``, the
    run's argument parser): a UsageError names each option that differs."""
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
    env = read_run_env(run_dir)
    if any(a not in FREE_OPTIONS for a in rest):
        whole = any(a == "--scenario" or a.startswith("--scenario=") for a in rest)
        if whole or parser is None:
            return run_dir, rest
        _same_options(run_dir, parser, list(env.argv), rest)
    return run_dir, list(env.argv) + [a for a in rest if a not in env.argv]


def _same_options(run_dir: Path, parser, recorded: list[str], given: list[str]) -> None:
    """A UsageError naming the options in ``given`` that change the run's recorded command line."""
    before, after = parser.parse_args(recorded), parser.parse_args(recorded + given)
    free = {o.lstrip("-").replace("-", "_") for o in FREE_OPTIONS}
    differ = [k for k in vars(after) if k not in free and getattr(before, k, None) != getattr(after, k)]
    if differ:
        what = "; ".join(f"--{k.replace('_', '-')} {_shown(getattr(after, k))} (the run's: "
                         f"{_shown(getattr(before, k, None))})" for k in differ)
        raise UsageError(f"--resume {run_dir}: these options differ from the run's: {what}; resume with just "
                         f"--resume {run_dir} (free to add: {', '.join(sorted(FREE_OPTIONS))}), or start a new "
                         f"run with them")


def _shown(value) -> str:
    if value is None:
        return "not given, the scenario's"
    if isinstance(value, list):
        return " ".join(map(str, value)) or "none"
    return str(value)


def read_run_env(run_dir: Path) -> Environment:
    if not Path(run_dir).is_dir():
        raise UsageError(f"--resume {run_dir}: not a directory; pass a run directory under results/")
    try:
        env = rundir.read_env(run_dir)
    except rundir.ResultsError as err:
        raise UsageError(f"--resume {run_dir}: {err}") from None
    if env.settings is None or env.argv is None:
        raise UsageError(f"--resume {run_dir}: env.json lacks the run's settings (an older harness, or not "
                         f"a run directory); start a new run instead")
    return env


def check_settings(run_dir: Path, recorded: dict, now: dict) -> None:
    """A one-line UsageError naming the first setting that differs from the run's."""
    for key in recorded.keys() | now.keys():
        if recorded.get(key) != now.get(key):
            if key == "comparable":
                diff = sorted(k for k in recorded[key].keys() | now[key].keys()
                              if recorded[key].get(k) != now[key].get(k))
                what = ", ".join(f"{k} {recorded[key].get(k)!r} -> {now[key].get(k)!r}" for k in diff)
            elif key == "cells":
                what = f"{len(recorded[key])} cells -> {len(now[key])} (or a different matrix, --only, --exclude)"
            else:
                what = f"{recorded.get(key)!r} -> {now.get(key)!r}"
            raise UsageError(f"--resume {run_dir}: the settings differ from the run's ({key}: {what}); resume "
                             f"with the run's own options (just --resume {run_dir}) or start a new run")


def stopped_message(run_dir: Path, why: str, torchrun: bool = False) -> str:
    done = len(rundir.read_results(run_dir))
    again = ("torchrun <the same torchrun options> run_bench.py" if torchrun else "python run_bench.py")
    return (f"run_bench.py: {why}; the {done} cell line(s) written are kept in {run_dir}/cells.jsonl; "
            f"run the rest with: {again} --resume {shlex.quote(str(run_dir))}")


def open_run_dir(args, argv: list[str], sc, device: str,
                  comparable: dict, n_cells: int, settings: dict) -> tuple[Path, Environment]:
    """Rank 0: the run directory and its env.json (or, with --resume, the run's), and the one-line header."""
    if args.resume:
        env = read_run_env(args.resume)
        rundir.read_results(args.resume)  # now: a damaged line is one line naming it, a cut last line a warning
        check_settings(args.resume, env.settings, settings)
        run_dir = Path(args.resume)
        env.resumed = [*(env.resumed or []), utc_now()]
    else:
        run_dir = rundir.new_run_dir(args.out, sc.name)
        env = Environment.capture(argv, {"mode": device, "accelerator": sc.accelerator.name,
                                         "world_size": sc.world_size})
        env = dataclasses.replace(env, scenario=sc.name, comparable=comparable, dataset=sc.dataset.to_dict(),
                                  cache_state=args.cache_state, repeats=args.repeats, settings=settings,
                                  argv=argv, imported=runsetup.import_env(sc))  # an imported source's scan
    env.write(run_dir)
    note = "real GPUs" if device == "cuda" else f"EMULATED {sc.accelerator.name} (no such GPUs here)"
    print(f"{sc.name}: {n_cells} cells x {args.repeats} repeats x {sc.world_size} ranks on {note}; "
          f"results in {run_dir}", file=sys.stderr)
    return run_dir, env


def stopped(args, run_dir: Path, env: Environment, code: int, torchrun: bool = False) -> int:
    """Ctrl-C or SIGTERM: the report over the cells written so far, how to resume, exit 130 or 143."""
    cells_done = rundir.read_results(run_dir)
    if cells_done:
        print(report.write_all(run_dir, cells_done, env, what_if_cores=args.what_if_cores))
    why = "interrupted (SIGINT)" if code == 130 else "terminated (SIGTERM)"
    print(stopped_message(run_dir, why, torchrun), file=sys.stderr)
    return code
