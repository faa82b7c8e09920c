"""The loader's stages timed where they run: CPU seconds of the thread that runs them (time.thread_time), per
batch, in a DataLoader worker, a thread of the thread loader, or the rank itself (workers = 0).

The stages (harness.measure.rankrecord.STAGES), in the order a sample passes them:

    read      the storage strategy's read_batch (the reader's own work: open, read, unpickle, HDF5 chunks)
    cache     the cache strategy's work around the read (lookup, insert, eviction, a shared cache's round trip)
    decode    JPEG decode + resize (harness.data.decoders.decode_resize)
    transform the rest of preparing an item: tokenising the caption, wrapping arrays as tensors, the flip,
              host normalisation
    collate   stacking the batch (padding the images)
    send      handing the batch over, worker side: its tensors moved into shared memory (what the DataLoader's
              queue would do on the worker's feeder thread; done here, timed, before the batch is returned)
    queue     the rest of a worker process's CPU between two batches, from its process clock less the timed
              stages: the DataLoader's worker loop and its queue (pickling the batch, passing the shared
              memory's handles on helper threads); not measured for the thread loader (0)
    receive   handing the batch over, rank side: the rank's CPU while it takes the batch from the loader
              (unpickling, mapping the shared memory); with workers = 0, the DataLoader's own work around
              the stages above

Each batch carries its own account (`STAGE_KEY` in the collated batch: seconds per stage, and where they were
measured); the rank adds `receive` and keeps the accounts of the batches it hands to training
(harness.train.batches.BatchSource). The timer costs two clock reads per sample and a few per batch, about
1 microsecond each (docs/stage-profile.md has the measured overhead).
"""
from __future__ import annotations

import os
import threading
import time

from harness.measure.rankrecord import STAGES

STAGE_KEY = "stage_s"  # the key of a collated batch that carries its account

_CURRENT = threading.local()  # the account of the batch this thread is preparing


def begin() -> dict:
    """A fresh account for the batch this thread starts preparing."""
    account = {"pid": os.getpid(), "tid": threading.get_ident()}
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


def timed_total(account: dict | None) -> float:
    """Seconds of the stages an account holds."""
    return 0.0 if not account else sum(v for k, v in account.items() if k in STAGES)


class TimedRead:
    """A reader's read_batch timed as the `read` stage (picklable: it holds the bound method)."""

    def __init__(self, read_batch):
        self.read_batch = read_batch

    def __call__(self, indices):
        start = time.thread_time()
        try:
            return self.read_batch(indices)
        finally:
            add("read", time.thread_time() - start)


_LAST = {"pid": None, "process_s": None}  # a worker's process clock at its previous batch's end


def worker_queue(account: dict) -> None:
    """In a DataLoader worker, at a batch's end: the `queue` stage, the process's CPU since the previous
    batch's end less this batch's timed stages (nothing for a worker's first batch)."""
    now, pid = time.process_time(), os.getpid()
    last = _LAST["process_s"] if _LAST["pid"] == pid else None
    if last is not None:
        account["queue"] = max(0.0, now - last - timed_total(account))
    _LAST.update(pid=pid, process_s=now)


def share_tensors(batch: dict) -> None:
    """In a DataLoader worker: the batch's tensors moved into shared memory, timed as `send` (the DataLoader's
    queue reuses a tensor already in shared memory, so the copy is made once, here)."""
    import torch

    start = time.thread_time()
    for value in batch.values():
        if isinstance(value, torch.Tensor):
            value.share_memory_()
        elif isinstance(value, list):
            for item in value:
                if isinstance(item, torch.Tensor):
                    item.share_memory_()
    add("send", time.thread_time() - start)
