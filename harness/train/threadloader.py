"""loader = "threads": a bounded pool of threads in the rank process that prepares whole batches (the
Dataset's __getitems__ and the collate), at most threads x prefetch batches in flight, delivered in the
batch sampler's order. It keeps the sampler contract: every batch of the batch sampler, once, in order.

Its CPU time is measured per thread (time.thread_time around each batch) and reported as the loader's; the
rank process's own CPU figure excludes it (harness.results.metrics). With pin (a GPU), the pinning of the
batch's tensors is its `send` stage (harness.train.stagetimer)."""
from __future__ import annotations

import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor

import torch

from harness.train.stagetimer import STAGE_KEY


class BatchThreadPool:
    def __init__(self, dataset, batch_sampler, collate_fn, threads: int, prefetch: int, pin: bool = False):
        self.dataset, self.batch_sampler, self.collate_fn = dataset, batch_sampler, collate_fn
        self.pin = pin  # page-locked batches for a GPU (as the DataLoader's pin_memory): asynchronous copies
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
            account = batch.get(STAGE_KEY)
            if account is not None:
                account["send"] = account.get("send", 0.0) + time.thread_time() - pinning
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
