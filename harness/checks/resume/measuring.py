"""What a restart costs per loader and storage (check-resume): the time from a restart to the first
batch, with the page cache warm and cold, and, for a stop in the middle of an epoch, the samples
the resumed loader repeats or drops against the uninterrupted epoch (counting.py counts them from
the recorded orders).

For each cell of the scenario (its loader x storage x sampler, built as a run builds it:
harness.train.pipeline, one rank's loader, rank 0 of the scenario's world, no training) and each
way of resuming:

* ``none``: nothing restored; the loader starts the epoch again (what a restart of a loader without
  state does).
* ``position``: the harness's own position: the samplers here keep no mid-epoch state (each is a
  pure function of (seed, epoch), moved by ``set_epoch``), so the harness resumes by skipping the
  batches already delivered from the rebuilt batch sampler; exact whenever the batching is a
  function of the order (fixed batches).
* ``state``: the loader's own state, where it has one: the nodes Loader's ``state_dict``
  (strategies.loader.nodes), torchdata's StatefulDataLoader for DataLoader workers (a drop-in for
  torch's DataLoader, which has no state of its own; it fast-forwards a batch sampler without
  state), and, on litdata storage, litdata's own StreamingDataLoader with its ``state_dict``
  (litdata's shuffle instead of the harness's sampler; it reads the items and decodes nothing). The
  thread pool and SPDL keep no state.

A case: the uninterrupted epoch read and recorded; a fresh loader read for ``stop`` batches (half
the epoch by default), its state taken, then stopped for real (its iterator closed, its worker
processes or threads ended, its readers closed); the restart, by default in a fresh spawned
process: the files dropped from the page cache (posix_fadvise, verified by a read that reaches the
device), the loader rebuilt and restored and timed to its first batch (cold), stopped, the files
pre-read, rebuilt and timed again (warm), and read to the epoch's end.
"""
from __future__ import annotations

import multiprocessing as mp
import signal
import time
import tomllib
from pathlib import Path

from harness.checks.resume import counting
from harness.checks.resume.loaders import Job, LoaderContext, open_run, read_rest
from harness.config.matrix import check_available, expand
from harness.config.scenario import Scenario
from harness.data import pagecache
from harness.data.materialise import materialise
from harness.errors import UsageError
from harness.run import supervisor

METHODS = ("none", "position", "state")
LITDATA_LOADER = "litdata"  # litdata's own StreamingDataLoader, on litdata storage
STATE_HOW = {
    "nodes": "torchdata.nodes Loader.state_dict",
    "workers": "torchdata StatefulDataLoader.state_dict (drop-in for DataLoader)",
    LITDATA_LOADER: "litdata StreamingDataLoader.state_dict",
}
UNWIND_S = 10.0  # Ctrl-C: how long the restart process may unwind (its workers' semaphores released)
HOW = {"none": "no state: restart from the epoch's start",
       "position": "harness: batches delivered skipped from the batch sampler"}


def restart(job: Job, state: dict | None) -> dict:
    """The restart: cold (files dropped) then warm (files pre-read), each timed from building the
    loader to its first batch; the warm one read to the epoch's end."""
    out: dict = {}
    for cache in ("cold", "warm"):
        prepared = pagecache.prepare(job.files, cache)
        if cache == "cold":
            out["cold_verified"] = bool(prepared.get("verified"))
        start = time.perf_counter()
        run = open_run(job, state)
        try:
            first = run.next()
            out[f"first_batch_{cache}_s"] = round(time.perf_counter() - start, 4)
            if cache == "warm":
                out["after"] = first + read_rest(run)
        finally:
            run.close()
    return out


def _child(job: Job, state: dict | None, conn) -> None:
    supervisor.detach_rank()  # its own process group (ended with all it started), and death with the parent
    try:
        conn.send(restart(job, state))
    except BaseException as err:  # the parent says what failed, in one line
        conn.send({"error": f"{type(err).__name__}: {err}"})


class RestartFailed(UsageError):
    """The restart process died or outlasted its time: one line, exit 2 (the rows measured are
    kept)."""


def restart_timeout(epoch_batches: int) -> float:
    """How long a restart may take: 120 s to start and build, and 3 s per batch of the epoch (as a
    cell's)."""
    return 120.0 + 3.0 * epoch_batches


def restart_fresh(job: Job, state: dict | None, timeout: float = restart_timeout(0)) -> dict:
    """The restart in a fresh spawned process (nothing of the stopped loader left in memory),
    watched: a process that dies (the OOM killer's SIGKILL) or outlasts `timeout` is a
    RestartFailed; on any way out its process group (its forkserver, its DataLoader workers) is
    killed, on Ctrl-C after it unwound."""
    ctx = mp.get_context("spawn")
    reader, writer = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(job, state, writer))
    what = f"the restarted loader {job.loader} on {job.storage}"
    try:
        proc.start()
        writer.close()
        out = _answer(proc, reader, timeout, what)
    except KeyboardInterrupt:
        if proc.pid is not None:  # in its own process group, the terminal's Ctrl-C did not reach it
            supervisor.interrupt(proc.pid)
            proc.join(UNWIND_S)
        raise
    finally:  # answered, dead, late or interrupted: nothing it started stays
        if proc.pid is not None:
            supervisor.kill_group(proc.pid)
            proc.join(timeout=10)
    if "error" in out:
        raise RuntimeError(f"{what} failed: {out['error']}")
    return out


def _answer(proc, reader, timeout: float, what: str) -> dict:
    """The child's one answer, read while watching it: its death or `timeout` is a
    RestartFailed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if reader.poll(supervisor.POLL_S):
            try:
                return reader.recv()
            except EOFError:  # it died: its end of the pipe closed
                break
        if not proc.is_alive():
            break
    else:
        raise RestartFailed(f"check-resume: {what}: no answer within {timeout:.0f} s; its process was ended, "
                            f"the rows before it are kept")
    proc.join(timeout=5)
    code = proc.exitcode
    how = f"was killed by {signal.Signals(-code).name}" if code and code < 0 else f"exited with code {code}"
    raise RestartFailed(f"check-resume: {what}: its process {how} before it answered (out of memory?); the "
                        f"rows before it are kept")


def stopped(job: Job, stop: int) -> tuple[list[int], dict | None]:
    """A fresh loader read for ``stop`` batches, its state taken, then stopped."""
    run = open_run(job, None)
    before: list[int] = []
    try:
        for _ in range(stop):
            before += run.next()
        return before, run.state()
    finally:
        run.close()


def epoch(job: Job) -> list[list[int]]:
    """The uninterrupted epoch, batch by batch."""
    run = open_run(job, None)
    batches = []
    try:
        while True:
            try:
                batches.append(run.next())
            except StopIteration:
                return batches
    finally:
        run.close()


def resumable(job: Job) -> str:
    return STATE_HOW[job.loader if job.cell is None else job.cell.choice("loader").create().kind] \
        if job.method == "state" else HOW[job.method]


def measure(job: Job, reference: list[list[int]], stop: int = 0, fresh: bool = True) -> dict:
    """One case's row: the stop after ``stop`` batches (0: half the epoch), the restart, the
    counts."""
    stop = stop or max(1, len(reference) // 2)
    before, state = stopped(job, stop)
    out = restart_fresh(job, state, restart_timeout(len(reference))) if fresh else restart(job, state)
    counted = counting.count([i for b in reference for i in b], before, out["after"])
    return {"loader": job.loader, "storage": job.storage, "sampler": job.sampler, "method": job.method,
            "resumable": resumable(job), "stop_batches": stop, "epoch_batches": len(reference),
            "first_batch_warm_s": out["first_batch_warm_s"], "first_batch_cold_s": out["first_batch_cold_s"],
            "cold_verified": out["cold_verified"], "fresh_process": fresh, **counted.as_dict()}


def methods_of(kind: str) -> tuple[str, ...]:
    return METHODS if kind in STATE_HOW else METHODS[:2]


def named_axes(sc: Scenario) -> set[str]:
    """The axes the scenario's own [matrix] names (the loaded matrix fills every other with its
    default)."""
    with open(sc.path, "rb") as f:
        return set(tomllib.load(f).get("matrix", {}))


def jobs(sc: Scenario, data_dir: Path, loaders: tuple[str, ...] = ()) -> list[Job]:
    """Every case of the scenario: each cell's ways of resuming, and litdata's own loader on
    litdata storage."""
    if not named_axes(sc) & {"loader", "storage"}:
        raise UsageError(f"scenario {sc.name} has neither a loader nor a storage axis in its matrix; check-resume "
                         f"compares loaders and storages (try --scenario loaders)")
    cells = expand(sc)
    check_available([c for cell in cells for c in cell.choices], remedy=False)
    known = {cell.choice("loader").label for cell in cells}
    has_litdata = any(cell.choice("storage").name == "litdata" for cell in cells)
    for name in loaders:
        if name not in known and not (name == LITDATA_LOADER and has_litdata):
            raise UsageError(f"loader {name!r} is not in scenario {sc.name}'s matrix; choose from "
                             f"{', '.join(sorted(known | ({LITDATA_LOADER} if has_litdata else set())))}")
    storages = {c.label: c for cell in cells for c in [cell.choice("storage")]}
    paths = {label: materialise(sc.dataset, c.name, data_dir, progress=False, params=dict(c.params))
             for label, c in storages.items()}
    ctx = LoaderContext(sc, paths, 0, sc.world_size)
    out = []
    for cell in cells:
        loader, storage = cell.choice("loader"), cell.choice("storage")
        if loaders and loader.label not in loaders:
            continue
        files = storage.create().files(paths[storage.label])
        out += [Job(ctx, cell, m, loader.label, storage.label, cell.choice("sampler").label, files)
                for m in methods_of(loader.create().kind)]
    if has_litdata and (not loaders or LITDATA_LOADER in loaders):
        label = next(lb for lb, c in storages.items() if c.name == "litdata")
        files = storages[label].create().files(paths[label])
        out += [Job(ctx, None, m, LITDATA_LOADER, label, "litdata shuffle", files, paths[label])
                for m in ("none", "state")]
    return out


def run(sc: Scenario, data_dir: Path, loaders: tuple[str, ...] = (), stop: int = 0, fresh: bool = True,
        on_row=None) -> list[dict]:
    """Every case's row; the uninterrupted epoch read once per cell (its first way of resuming's
    loader)."""
    rows, references = [], {}
    for job in jobs(sc, data_dir, loaders):
        key = (job.loader, job.storage, job.sampler)
        if key not in references:
            references[key] = epoch(job)
        row = measure(job, references[key], stop, fresh)
        rows.append(row)
        if on_row is not None:
            on_row(row)
    return rows
