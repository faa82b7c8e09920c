"""The loader's stages timed where they run: CPU seconds of the thread that runs them
(time.thread_time), per batch, in a DataLoader worker, a thread of the thread loader, or the rank
itself (workers = 0).

Every stage has its own clock reads, at the start and the end of the code that is that stage
(harness.measure.rankrecord.STAGES, in the order a sample passes them):

    read      around the storage strategy's read_batch (timed_read): open, read, unpickle,
              HDF5 chunks
    cache     around the cache strategy's call
              (harness.train.torchdataset.SampleDataset.__getitems__), less the calls it makes to
              what it wraps, each timed around that call (timed_inside): the lookup, the insert,
              the eviction, a shared cache's round trip, and nothing of the read or the preparing
    decode    around each decode_resize call (JPEG decode + resize)
    transform around each transform call: tokenising the caption and wrapping arrays as tensors
              (per sample), drawing the flips (per batch; the mirroring is the collate's copy), the
              host normalisation (in the collate)
    collate   around the stacking of the batch: each image written into its slot of the padded
              batch (and mirrored in that copy when its flip was drawn), the tokens
    send      around handing the batch over, worker side (harness.train.torchdataset.hand_over):
              the batch's shared memory allocated, its small tensors wrapped to cross in the
              pickle, any other tensor moved into shared memory (what the DataLoader's queue would
              do on the worker's feeder thread, done here, timed); the thread loader's pin_memory
    queue     in a DataLoader worker, the worker loop's own CPU (worker_end, begin): the worker's
              main thread from one batch's end (after `send`) to the next batch's start (putting
              the batch on the data queue, taking the next indices from the index queue), plus the
              CPU of the queue's helper threads (QUEUE_THREADS: the feeder thread that pickles and
              writes the batch, the resource sharer that passes the shared memory's file
              descriptors), each read from its own thread clock; nothing for a worker's first batch
              or for the thread loader (0)
    receive   handing the batch over, rank side: the rank's CPU while it takes the batch from the
              loader (unpickling, mapping the shared memory); with workers = 0, the DataLoader's
              own work around the stages above (harness.train.batches.BatchSource)

What no timer covers is not a stage: the glue between the timers inside a batch (the fetcher's
call, building the items' dicts, the loop over the samples), threads that are not the queue's, a
worker's start-up. It is the `untimed` share of the profile (harness.analysis.stages), the loader's
CPU read from /proc less the timed stages, never folded into a stage: no stage here is a process
clock less the others.

Each batch carries its own account (`STAGE_KEY` in the collated batch: seconds per stage, and where
they were measured); the rank adds `receive` and keeps the accounts of the batches it hands to
training (harness.train.batches.BatchSource). The timers cost three clock reads per sample and a
few per batch, about 1 microsecond each (docs/measurements/stage-profile.md has the measured
overhead).
"""
from __future__ import annotations

import os
import sys
import threading
import time

from harness.measure.rankrecord import STAGES

STAGE_KEY = "stage_s"  # the key of a collated batch that carries its account
INSIDE_KEY = "_inside_s"  # (no stage) this batch's seconds in the calls a cache made to what it wraps

_CURRENT = threading.local()  # the account of the batch this thread is preparing


def begin() -> dict:
    """A fresh account for the batch this thread starts preparing. In a DataLoader worker after its
    first batch: its `queue` starts with the main thread's CPU since the previous batch's end
    (worker_end)."""
    account = {"pid": os.getpid(), "tid": threading.get_ident()}
    if _LAST["pid"] == account["pid"] and _LAST["tid"] == account["tid"] and _LAST["end_s"] is not None:
        account["queue"] = max(0.0, time.thread_time() - _LAST["end_s"])
    _CURRENT.account = account
    return account


def resume(account: dict) -> None:
    """Make `account` this thread's current one again (the collate, after the dataset's read)."""
    _CURRENT.account = account


def current() -> dict | None:
    return getattr(_CURRENT, "account", None)


def add(stage: str, seconds: float) -> None:
    """Add seconds to a stage of this thread's current batch (nothing without one)."""
    account = current()
    if account is not None:
        account[stage] = account.get(stage, 0.0) + seconds


def note_send(batch: dict, seconds: float) -> None:
    """Add seconds to the `send` stage of a collated batch's account (nothing without one): the
    in-process loaders' pinning, handed to the loader strategy as LoaderInputs.note_send."""
    account = batch.get(STAGE_KEY)
    if account is not None:
        account["send"] = account.get("send", 0.0) + seconds


def timed_total(account: dict | None) -> float:
    """Seconds of the stages an account holds."""
    return 0.0 if not account else sum(v for k, v in account.items() if k in STAGES)


class TimedCall:
    """A call timed into one key of the account (picklable: it holds the bound method and the
    key)."""

    def __init__(self, call, key: str):
        self.call, self.key = call, key

    def __call__(self, indices):
        start = time.thread_time()
        try:
            return self.call(indices)
        finally:
            add(self.key, time.thread_time() - start)


def timed_read(read_batch) -> TimedCall:
    """A reader's read_batch timed as the `read` stage."""
    return TimedCall(read_batch, "read")


def timed_inside(fetch) -> TimedCall:
    """What a cache strategy wraps (the read, or the read and the preparing), its calls timed into
    the account's INSIDE_KEY: the cache's own time is its call's less these."""
    return TimedCall(fetch, INSIDE_KEY)


def timed_cache(fetch, indices: list, account: dict):
    """`fetch` (a cache strategy's call around timed_inside) timed as the `cache` stage: its CPU
    less what it spent in the calls it made to what it wraps (timed by timed_inside)."""
    account.pop(INSIDE_KEY, None)
    start = time.thread_time()
    fetched = fetch(indices)
    spent = time.thread_time() - start
    account["cache"] = account.get("cache", 0.0) + max(0.0, spent - account.pop(INSIDE_KEY, 0.0))
    return fetched


# --- the worker loop's own CPU: the queue stage ----------------------------------------------------------

# the Python threads of a DataLoader worker that do its queue's work: multiprocessing.Queue's feeder thread
# (pickles each batch and writes it to the pipe) and the resource sharer's server (multiprocessing.
# resource_sharer: hands the shared memory's file descriptors to the rank), by the names Python 3.11 gives them
QUEUE_THREADS = ("QueueFeederThread",)
QUEUE_THREAD_TARGETS = ("(_serve)",)

# a worker's state at its previous batch's end: its main thread's clock, the queue threads' clocks
_LAST: dict = {"pid": None, "tid": None, "end_s": None, "threads": {}}


def is_queue_thread(thread: threading.Thread) -> bool:
    name = thread.name or ""
    return name in QUEUE_THREADS or name.endswith(QUEUE_THREAD_TARGETS)


def thread_cpu_s(native_id: int) -> float | None:
    """The CPU seconds of a thread of this process, from its own clock (Linux's per-thread CPU
    clock of a kernel thread id, what pthread_getcpuclockid returns); None when it has ended or off
    Linux."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return time.clock_gettime(((~native_id) << 3) | 6)  # MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED)
    except OSError:
        return None


def queue_threads_cpu_s() -> dict[int, float]:
    """native thread id -> CPU seconds, for this process's queue threads (is_queue_thread) now
    alive."""
    out = {}
    for thread in threading.enumerate():
        if thread.native_id is not None and is_queue_thread(thread):
            cpu = thread_cpu_s(thread.native_id)
            if cpu is not None:
                out[thread.native_id] = cpu
    return out


def worker_end(account: dict) -> None:
    """In a DataLoader worker, at a batch's end (after `send`): its `queue` gets the queue threads'
    CPU since the previous batch's end (a thread started since counts from its start; one that
    ended since is lost: untimed), and the main thread's clock is kept for the next batch's
    begin(). A worker's first batch gets no queue (nothing before it is the loop's work on
    batches)."""
    threads = queue_threads_cpu_s()
    pid, tid = os.getpid(), threading.get_ident()
    if _LAST["pid"] == pid:
        before = _LAST["threads"]
        helpers = 0.0
        for t, now in threads.items():
            last = before.get(t, 0.0)
            helpers += now - last if now >= last else now  # below its last reading: a new thread, same id
        account["queue"] = account.get("queue", 0.0) + helpers
    _LAST.update(pid=pid, tid=tid, threads=threads, end_s=time.thread_time())
