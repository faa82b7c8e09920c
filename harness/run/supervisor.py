"""The launcher's watch over its rank processes: a cell whose rank dies or hangs is recorded as
failed, every process the ranks started is ended, and fresh ranks go on with the cells that remain.

Each spawned rank moves into its own process group (its forkserver, DataLoader workers and
shared-cache servers inherit it) and dies with the launcher (PR_SET_PDEATHSIG). It writes a
heartbeat file under ``RUN_DIR/.ranks/`` when a cell starts and as its steps advance. The launcher
polls: a rank that exited non-zero, or no cell finishing within the cell's deadline (``[training]
cell_timeout_s``, by default derived from the steps), ends the chunk: every rank's group is killed,
the first cell of the chunk without a line in cells.jsonl gets a line with ``error`` naming the
rank and the cause, and the remaining cells start again in fresh ranks. A failure before any rank
reached its first cell is a run error instead (nothing would ever run).

Ending a rank group on Ctrl-C or SIGTERM: what each rank started (DataLoader workers, forkserver,
cache server) is killed, then the rank gets SIGINT and a few seconds to unwind (the multiprocessing
queues it made for its workers unlink their named semaphores and unregister them from the
launcher's resource tracker), then its whole process group gets SIGKILL. Killed outright, a rank
leaves its semaphores registered, and the tracker reports them at the launcher's exit ("There
appear to be N leaked semaphore objects": 28 after Ctrl-C in a cell with 2 workers on 2 ranks).
"""
from __future__ import annotations

import gc
import json
import math
import multiprocessing
import os
import shutil
import signal
import time
import traceback
from dataclasses import replace
from pathlib import Path

from harness import safewrite
from harness.config.launchconfig import LaunchConfig
from harness.data.materialise import verify_dir
from harness.errors import UsageError
from harness.measure.telemetry import stat_fields
from harness.results import rundir
from harness.results.cellresult import CellResult, Figures
from harness.run import budgetstate, deathsig

HEARTBEATS = ".ranks"
POLL_S = 0.1
GRACE_S = 2.0  # after a rank fails, how long its peers may take to fail in turn before the cause is chosen
STOP_GRACE_S = 10.0  # Ctrl-C / SIGTERM: how long the ranks may unwind after SIGINT before SIGKILL (measured: 3 s)
# what a rank says when a peer died under it (gloo, NCCL): not the cause
PEER_FAILURE = ("Connection closed by peer", "Connection reset by peer", "remote worker", "Broken pipe",
                "NCCL communicator was aborted")


class RunFailed(UsageError):
    """The ranks failed before running any cell: retrying the next cell would fail the same way."""


class Interrupted(BaseException):
    """SIGTERM (or SIGINT) received by the launcher; `code` is the exit code to end with (143 or
    130)."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.code = 128 + signum


def raise_interrupted(signum, _frame) -> None:
    """The first SIGTERM raises Interrupted; the same signal again is ignored while it is honoured:
    Slurm signals every process of the step and torchrun passes the signal on, so a rank gets it
    twice, the second often while rank 0 writes the report (which it then lost: 3 of 10 tries)."""
    signal.signal(signum, _stopping)
    raise Interrupted(signum)


def _stopping(_signum, _frame) -> None:
    pass


def default_timeout(config: LaunchConfig) -> float:
    """The cell deadline: the scenario's cell_timeout_s, else 120 s of set-up plus 3 s per step and
    phase."""
    tr = config.scenario.training
    if tr.cell_timeout_s:
        return float(tr.cell_timeout_s)
    steps = tr.steps or tr.epochs * math.ceil(config.scenario.dataset.samples
                                              / (config.scenario.world_size * tr.batch_size))
    phases = 3 if config.request.decompose else 1
    return 120.0 + 3.0 * phases * (tr.warmup_steps + steps)


# --- in the rank -------------------------------------------------------------------------------------------

def detach_rank() -> None:
    """A spawned rank: its own process group (so the launcher can end it with all it started), and
    death with the launcher, also where the launcher died while this rank was starting."""
    try:
        os.setpgid(0, 0)
    except OSError:
        pass
    parent = multiprocessing.parent_process()
    deathsig.die_with_parent(parent.pid if parent is not None else None)


def heartbeat_dir(run_dir: Path) -> Path:
    return Path(run_dir) / HEARTBEATS


def write_heartbeat(run_dir: Path, rank: int, **fields) -> None:
    """Atomically replace this rank's heartbeat file (pid, time and what it is doing)."""
    d = safewrite.make_dir(heartbeat_dir(run_dir), run_dir)
    safewrite.write_text(d / f"rank{rank}.json", json.dumps({"rank": rank, "pid": os.getpid(), "t": time.time(),
                                                            **fields}), run_dir)


def write_rank_error(run_dir: Path, rank: int, err: BaseException) -> None:
    """Why this rank is about to exit; a UsageError (bad data, say) or an error that says it stops
    the run (a remote store's) is fatal: the launcher stops the run. What the failed cell held is
    released (release_frames)."""
    try:
        _write_rank_error(run_dir, rank, err)
    finally:
        release_frames(err)


def _write_rank_error(run_dir: Path, rank: int, err: BaseException) -> None:
    d = safewrite.make_dir(heartbeat_dir(run_dir), run_dir)
    if (d / f"rank{rank}.error").exists():
        return  # the first error of this rank is the cause
    safewrite.write_text(d / f"rank{rank}.error", f"{type(err).__name__}: {' '.join(str(err).split())[:500]}",
                         run_dir)
    if isinstance(err, UsageError) or getattr(err, "stops_run", False):  # a remote store's error, too
        safewrite.write_text(d / f"rank{rank}.fatal", err.line() if hasattr(err, "line") else str(err), run_dir)


def release_frames(err: BaseException) -> None:
    """A rank on its way out (it leaves with os._exit, which runs no finalizer): clear the finished
    frames that the exception's traceback keeps alive (the cell's pipeline, its DataLoader
    iterator, their multiprocessing queues) and collect them, so that every queue's named
    semaphores are unlinked and unregistered from the launcher's resource tracker now."""
    traceback.clear_frames(err.__traceback__)
    gc.collect()


def fatal_error(run_dir: Path) -> str | None:
    """The one-line message of a rank that stopped on a usage error (e.g. damaged data), if any."""
    for path in sorted(heartbeat_dir(run_dir).glob("rank*.fatal")):
        return path.read_text().strip()
    return None


def read_heartbeats(run_dir: Path) -> dict[int, dict]:
    out = {}
    for path in heartbeat_dir(run_dir).glob("rank*.json"):
        try:
            beat = json.loads(path.read_text())
            out[int(beat["rank"])] = beat
        except (OSError, ValueError, KeyError):
            continue
    return out


# --- in the launcher ---------------------------------------------------------------------------------------

def done_keys(run_dir: Path) -> set[tuple[str, int]]:
    """(cell id, repeat) of every line of cells.jsonl, measured or failed."""
    return {(c.cell, c.repeat) for c in rundir.read_results(run_dir)}


def remaining(config: LaunchConfig, plan: list[tuple[int, int]]) -> list[tuple[int, int]]:
    done = done_keys(config.run_dir)
    return [(r, i) for r, i in plan if (config.cells[i].id, r) not in done]


def failed_line(config: LaunchConfig, item: tuple[int, int], error: str, elapsed: float) -> dict:
    """The line of a cell whose ranks died or hung: its identity, the error, no figures."""
    repeat, index = item
    sc = config.scenario
    return CellResult.of_cell(sc, config.cells[index], config.device_name, config.device != "cuda", sc.world_size,
                              repeat, elapsed_s=round(elapsed, 3), figures=Figures(), error=error).to_json()


def kill_group(pid: int) -> None:
    """SIGKILL a rank's process group (itself and everything it started), and the rank itself."""
    for kill, target in ((os.killpg, pid), (os.kill, pid)):
        try:
            kill(target, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def interrupt(leader: int) -> None:
    """What the leader of a process group started is killed (its DataLoader workers, its
    forkserver), then the leader gets SIGINT, to unwind and release its queues' semaphores."""
    for pid in group_members(leader):
        if pid != leader:
            _signal(pid, signal.SIGKILL)
    _signal(leader, signal.SIGINT)


def group_members(pgid: int) -> list[int]:
    """The processes of process group ``pgid`` (read from /proc; [] where there is none)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        fields = stat_fields(stat)
        if fields is not None and len(fields) > 2 and fields[2] == str(pgid):  # state, ppid, pgrp
            out.append(int(stat.parent.name))
    return out


class RankGroup:
    """The world_size rank processes of one chunk of cells."""

    def __init__(self, config: LaunchConfig, data_paths: dict, target, prepare=None):
        import torch.multiprocessing as mp

        if prepare is not None:
            prepare()  # e.g. a fresh rendezvous port
        self.config, self.started = config, time.time()
        for old in heartbeat_dir(config.run_dir).glob("rank*"):
            old.unlink(missing_ok=True)
        ctx = mp.get_context("spawn")
        world = config.scenario.world_size
        self.procs = [ctx.Process(target=target, args=(r, world, config, data_paths), daemon=False)
                      for r in range(world)]
        try:
            for p in self.procs:
                p.start()
        except BaseException:  # Ctrl-C while starting: end the ranks already started
            self.stop()
            raise

    def failure(self, timeout: float) -> tuple[str, bool] | None:
        """(cause, whether any rank had reached a cell) once the chunk failed; None while it runs
        or when every rank exited 0 ("" then: see `finished`)."""
        beats = read_heartbeats(self.config.run_dir)
        reached = bool(beats)
        if any(p.exitcode not in (None, 0) for p in self.procs):
            return self._first_death(beats), reached
        started = max((b.get("cell_t", b["t"]) for b in beats.values()), default=self.started)
        if time.time() - started > timeout and not self.finished:
            return self._hang(timeout, beats), reached
        return None

    def cell_started(self) -> float:
        beats = read_heartbeats(self.config.run_dir).values()
        return max((b.get("cell_t", b["t"]) for b in beats), default=self.started)

    @property
    def finished(self) -> bool:
        return all(p.exitcode == 0 for p in self.procs)

    def _first_death(self, beats: dict) -> str:
        """The cause of the first failure: a rank's death makes its peers fail too ("connection
        closed"), so after a short grace a rank killed by a signal comes first, then one with its
        own error."""
        deadline = time.monotonic() + GRACE_S
        while time.monotonic() < deadline and any(p.exitcode is None for p in self.procs):
            time.sleep(POLL_S)
        causes = [(rank, self._death(rank, p.exitcode, beats)) for rank, p in enumerate(self.procs)
                  if p.exitcode not in (None, 0)]
        def order(item):
            rank, cause = item
            return (0 if "killed by" in cause else 2 if any(m in cause for m in PEER_FAILURE) else 1, rank)
        return min(causes, key=order)[1]

    def _death(self, rank: int, code: int, beats: dict) -> str:
        where = _where(beats.get(rank))
        if code < 0:
            return f"rank {rank} was killed by {signal.Signals(-code).name}{where}"
        path = heartbeat_dir(self.config.run_dir) / f"rank{rank}.error"
        text = path.read_text().strip() if path.exists() else ""
        return f"rank {rank} exited with code {code}{where}" + (f": {text}" if text else "")

    def _hang(self, timeout: float, beats: dict) -> str:
        steps = ", ".join(f"rank {r} at step {b.get('step', 0)}/{b.get('total', '?')}"
                          for r, b in sorted(beats.items()))
        return (f"timeout: the cell did not finish within {timeout:.0f} s (cell_timeout_s)"
                + (f"; {steps}" if steps else "") + "; every rank was ended")

    def stop(self, grace: float = 0.0) -> None:
        """End every rank and everything it started; reap the ranks. With ``grace``, each rank
        still running first gets SIGINT and that many seconds to unwind (its DataLoader workers and
        their semaphores released) before its process group gets SIGKILL."""
        try:  # a second Ctrl-C during the grace still kills every group
            self._interrupt(grace)
        finally:
            for p in self.procs:
                if p.pid is not None:
                    kill_group(p.pid)
        for p in self.procs:
            if p.pid is not None:
                p.join(timeout=10)

    def _interrupt(self, grace: float) -> None:
        """Every rank still running: what it started (DataLoader workers, its forkserver, a cache
        server) is killed, then the rank gets SIGINT and up to ``grace`` seconds to exit. Workers
        go first: a worker still sending a batch when its rank unwinds would print a traceback of
        the rank's closed connection (multiprocessing.resource_sharer); the rank itself made the
        queues and their semaphores, and releases them as it unwinds."""
        running = [p for p in self.procs if p.pid is not None and p.exitcode is None]
        if not grace or not running:
            return
        for p in running:
            interrupt(p.pid)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(p.exitcode is None for p in running):
            time.sleep(POLL_S)


def _where(beat: dict | None) -> str:
    if not beat or not beat.get("total"):
        return ""
    return f" at step {beat['step']}/{beat.get('total', '?')}"


def visits_left(config: LaunchConfig) -> list[tuple[int, int]]:
    """The planned visits without a line, then those of a budget pass cut short
    (harness.run.budgetstate)."""
    return remaining(config, config.todo()) + budgetstate.pass_left(config)


def supervise(config: LaunchConfig, data_paths: dict, target, prepare=None, log=print) -> list[str]:
    """Run config.todo() (and, with a budget, its passes) in fresh rank groups until every visit
    has a line and the budget has ended; the failures, one per failed visit."""
    timeout = default_timeout(config)
    failures: list[str] = []
    while True:
        rundir.drop_cut_tail(config.run_dir / "cells.jsonl")
        todo = visits_left(config)
        if not todo and not budgetstate.is_open(config):
            shutil.rmtree(heartbeat_dir(config.run_dir), ignore_errors=True)
            return failures
        group = RankGroup(replace(config, plan=todo, supervised=True), data_paths, target, prepare)
        try:
            outcome = _watch(group, timeout)
        except BaseException:  # Ctrl-C, SIGTERM
            group.stop(grace=STOP_GRACE_S)
            raise
        group.stop()  # a failed cell's ranks are dead, hung or stuck in a collective with a dead peer: killed
        if outcome is None:
            if visits_left(config):
                continue  # every rank exited 0; anything left (none expected) starts again
            return failures  # the ranks ended the budget themselves
        failure = _failed(config, outcome, data_paths, group, log)
        if failure is None:
            return failures
        failures.append(failure)


def _failed(config: LaunchConfig, outcome: tuple[str, bool], data_paths: dict, group: RankGroup,
            log=print) -> str | None:
    """After a rank group failed: the visit it was in gets its error line; the failure's line (None
    when every visit was written and the budget has ended: a rank died on its way out)."""
    fatal = fatal_error(config.run_dir)
    if fatal:
        raise UsageError(fatal)
    cause, reached = outcome
    rundir.drop_cut_tail(config.run_dir / "cells.jsonl")
    left = visits_left(config)
    if not left and not budgetstate.is_open(config):
        return None
    if not reached:
        raise RunFailed(f"the ranks failed before their first cell: {cause}")
    if not left:  # between two budget passes: no visit to blame; fresh ranks go on with the budget
        log(f"run_bench.py: a rank failed between budget passes: {cause}; fresh ranks go on with the budget")
        return f"between budget passes: {cause}"
    cell = config.cells[left[0][1]]
    elapsed = time.time() - group.cell_started()
    check_data(cell, data_paths)  # damaged data is the user's to regenerate, not a failed cell (exit 1)
    rundir.append_cell(config.run_dir, failed_line(config, left[0], cause, elapsed))
    log(f"run_bench.py: cell {cell.id} failed: {cause}; fresh ranks go on with {len(left) - 1} remaining "
        f"visit(s){' and the budget' if config.budget_s else ''}")
    return f"{cell.id} (repeat {left[0][0]}): {cause}"


def check_data(cell, data_paths: dict) -> None:
    """After a rank died in `cell`: every byte of its storage's files against the manifest. The
    quick check before each visit (sizes, sampled checksums) misses damage in the middle of a file,
    which kills the reader; found here, it is the DataError line naming the file and --regenerate
    (exit 2)."""
    storage = cell.choice("storage")
    if storage.label in data_paths:
        verify_dir(data_paths[storage.label], storage.name, full=True)


def _watch(group: RankGroup, timeout: float) -> tuple[str, bool] | None:
    while True:
        outcome = group.failure(timeout)
        if outcome is not None:
            return outcome
        if group.finished:
            return None
        time.sleep(POLL_S)
