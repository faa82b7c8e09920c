"""--resume RUN_DIR: a run's settings, its directory opened (new, or the run it resumes), and the
line that tells how to resume a run that stopped early (harness.commands.bench writes the report
over the cells written).

A run's env.json records its settings (scenario, the comparable settings, the cells, repeats and
measurement options) and its command line. `--resume RUN_DIR` alone replays that command line
(harness.cli settles it, with the run's order seed, into the request); given with other options
they must yield the same settings (else one line, exit 2). The cells and repeats without a line in
cells.jsonl then run (harness.run.supervisor skips the rest), and the report is rebuilt over all of
them.
"""
from __future__ import annotations

import dataclasses
import errno
import fcntl
import os
import shlex
import sys
from pathlib import Path

from harness.config import datasetup
from harness.config.request import BenchRequest
from harness.errors import UsageError
from harness.results import rundir
from harness.results.environment import Environment, utc_now

# options that may change between the first run and its resumption
FREE_OPTIONS = {"--quiet", "--debug", "--verify-data", "--regenerate", "--history"}


LOCK = ".writer.lock"  # in the run directory: held by the one process that writes it (a run, its --resume)
_held: dict[Path, int] = {}  # run directory -> the lock's descriptor, open until this process ends

REPLAY_KEYS = ("out", "data")  # recorded since these were checked; a run from before lacks them


def replay_settings(request: BenchRequest) -> dict:
    """The settings a command line alone decides (no scenario read, nothing imported): what a
    resume's replayed line is checked against before anything runs, its plugins included."""
    order = {"order": "random", "order_seed": request.order_seed} if request.order == "random" else {}
    return {"repeats": request.repeats, "cache_state": request.cache_state, "decompose": request.decompose,
            "profile": request.profile, "plugins": list(request.plugins),
            "data_dir": str(Path(request.data_dir).resolve()), "out": str(Path(request.out).resolve()),
            "data": None if request.data.path is None else str(request.data.path), **order}


def settings_of(request: BenchRequest, sc, cells, device: str, comparable: dict) -> dict:
    """What a resumed run must share with the run it completes (a fixed order adds nothing: runs
    made before the random order existed resume with --order fixed)."""
    return {"scenario": sc.name, "comparable": comparable, "cells": [c.id for c in cells], "device": device,
            **replay_settings(request)}


def check_replay(run_dir: Path, request: BenchRequest) -> None:
    """Before a resumed line loads a plugin or reads anything: what it asks for is what the run
    recorded as typed values (a hand-edited env.json argv, a --plugin, --out or --data the run did
    not have, is refused)."""
    recorded = {"plugins": [], **read_run_env(run_dir).settings}  # a run without plugins: none may be imported
    now = replay_settings(request)
    check_settings(run_dir, {k: v for k, v in recorded.items() if k in now},
                   {k: v for k, v in now.items() if k in recorded})


def recorded_order_seed(run_dir: Path) -> int | None:
    """The random order's seed a run recorded in env.json (None: a fixed order, or a run from
    before)."""
    recorded = (read_run_env(run_dir).settings or {}).get("order_seed")
    return None if recorded is None else int(recorded)


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
    """A one-line UsageError naming the first setting that differs from the run's (a key of
    REPLAY_KEYS that a run from before did not record is not compared)."""
    for key in sorted(recorded.keys() | now.keys()):
        if key in REPLAY_KEYS and key not in recorded:
            continue
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


def take_lock(run_dir: Path) -> None:
    """This process becomes the one writer of `run_dir` until it ends: an exclusive flock on its
    lock file (opened without following a link). Another writer holding it is one line naming the
    directory and its pid, exit 2."""
    run_dir = Path(run_dir)
    if run_dir.resolve() in _held:
        return
    path = run_dir / LOCK
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as err:
        why = "it is a symbolic link; remove it" if err.errno == errno.ELOOP else f"{err.strerror}"
        raise UsageError(f"{run_dir}: cannot open its lock file {LOCK} ({why})") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise UsageError(f"{run_dir} is being written by another run_bench.py (pid {holder}); one process "
                         f"writes a run directory: wait for it to end (or stop it), then resume") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    _held[run_dir.resolve()] = fd


def open_run_dir(request: BenchRequest, sc, device: str, comparable: dict, n_cells: int,
                 settings: dict) -> tuple[Path, Environment]:
    """Rank 0: the run directory and its env.json (or, with --resume, the run's), and the one-line
    header."""
    if request.resume:
        env = read_run_env(request.resume)
        take_lock(request.resume)  # before anything is read for the resume or written
        rundir.read_results(request.resume)  # now: a damaged line is one line naming it, a cut last line a warning
        check_settings(request.resume, env.settings, settings)
        run_dir = Path(request.resume)
        print(f"resume: replaying the run's command line, checked against the settings it recorded: run_bench.py "
              f"{shlex.join(request.argv)}", file=sys.stderr)
        env.resumed = [*(env.resumed or []), utc_now()]
    else:
        argv = list(request.argv)
        run_dir = rundir.new_run_dir(request.out, sc.name)
        take_lock(run_dir)
        env = Environment.capture(argv, {"mode": device, "accelerator": sc.accelerator.name,
                                         "world_size": sc.world_size})
        env = dataclasses.replace(env, scenario=sc.name, comparable=comparable, dataset=sc.dataset.to_dict(),
                                  cache_state=request.cache_state, repeats=request.repeats, settings=settings,
                                  argv=argv, imported=datasetup.import_env(sc),  # an imported source's scan
                                  min_effect=request.gate.min_effect, order_tolerance=request.order_tolerance,
                                  family_alpha=request.gate.family_alpha,
                                  budget_s=request.settled_budget_s(sc.budget_s))
    env.write(run_dir)
    note = "real GPUs" if device == "cuda" else f"EMULATED {sc.accelerator.name} (no such GPUs here)"
    print(f"{sc.name}: {n_cells} cells x {request.repeats} repeats x {sc.world_size} ranks on {note}; "
          f"results in {run_dir}", file=sys.stderr)
    return run_dir, env
