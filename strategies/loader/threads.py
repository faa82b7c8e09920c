"""threads: a bounded pool of threads in the rank process, each preparing whole batches (read,
decode, collate), ``prefetch`` batches per thread in flight, delivered in the batch sampler's
order. ``threads`` 0 means the scenario's workers (at least 1). Decoding releases the GIL (PIL,
numpy), so threads overlap.

Its pipeline, BatchThreadPool, keeps the sampler contract: every batch of the batch sampler, once,
in order, at most threads x prefetch batches in flight. Its CPU time is measured per thread
(time.thread_time around each batch) and reported as the loader's; the rank process's own CPU
figure excludes it (harness.results.metrics). With pin (a GPU), the pinning of the batch's tensors
is its `send` stage (LoaderInputs.note_send, the harness's stage timer). InProcessLoader is the
base of the loaders that prepare batches in threads of the rank (threads, nodes, spdl): each names
its pool class."""
from __future__ import annotations

import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor

import torch

from strategies.params import flag, integer
from strategies.protocols import LoaderBase, LoaderInputs
from strategies.registry import register


class BatchThreadPool:
    def __init__(self, dataset, batch_sampler, collate_fn, threads: int, prefetch: int, pin: bool = False,
                 note_send=None):
        self.dataset, self.batch_sampler, self.collate_fn = dataset, batch_sampler, collate_fn
        self.pin = pin  # page-locked batches for a GPU (as the DataLoader's pin_memory): asynchronous copies
        self.note_send = note_send  # adds a batch's pinning seconds to its `send` stage (LoaderInputs.note_send)
        self.threads, self.depth = max(1, threads), max(1, threads) * max(1, prefetch)
        self._lock = threading.Lock()
        self.cpu_s = 0.0  # CPU seconds of the pool's threads so far

    def __len__(self) -> int:
        return len(self.batch_sampler)

    def _load(self, indices: list[int]) -> dict:
        start = time.thread_time()
        batch = self.collate_fn(self.dataset.__getitems__(indices))
        if self.pin:  # the hand-over on the loader's side: timed as the batch's `send` stage
            pinning = time.thread_time()
            batch = {k: v.pin_memory() if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
            if self.note_send is not None:
                self.note_send(batch, time.thread_time() - pinning)
        spent = time.thread_time() - start
        with self._lock:
            self.cpu_s += spent
        return batch

    def __iter__(self):
        pool = ThreadPoolExecutor(self.threads, thread_name_prefix="loader")
        pending: deque = deque()
        try:
            batches = iter(self.batch_sampler)
            for indices in batches:
                pending.append(pool.submit(self._load, list(indices)))
                if len(pending) >= self.depth:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:  # closed early (a cell that stopped): drop what is queued, let running batches finish
            for future in pending:
                future.cancel()
            pool.shutdown(wait=True, cancel_futures=True)


class InProcessLoader(LoaderBase):
    """A loader whose batches are prepared in threads of the rank process, by its ``pool``
    class."""

    in_process = True
    pool: type = BatchThreadPool

    def pipeline(self, inputs: LoaderInputs) -> BatchThreadPool:
        return self.pool(inputs.dataset.for_threads(), inputs.batch_sampler, inputs.collate,
                         self.threads or max(1, inputs.workers), self.prefetch, pin=inputs.pin,
                         note_send=inputs.note_send)


@register("loader", "threads")
class ThreadLoader(InProcessLoader):
    kind = "threads"

    def __init__(self, threads: int = 0, prefetch: int = 2, side_stream: bool = False) -> None:
        self.threads = integer("threads", threads, 0)
        self.prefetch = integer("prefetch", prefetch, 1)
        self.side_stream = flag("side_stream", side_stream)
