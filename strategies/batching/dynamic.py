"""Batches packed under a device-cost budget, optionally bucketed by a sort key to cut padding.

The sampler's stream is read in windows of ``bucket_window`` indices; each window is sorted by
``sort_key`` (stable) so that similar samples (aspect ratio, area, bytes) sit next to each other,
then the stream is packed greedily: a sample joins the current batch while ``batch_cost(batch +
[i]) <= budget * budget_fraction`` and the batch has fewer than ``max_batch`` samples. A batch is
never closed below ``min_batch`` samples (default 1, so a single sample over budget forms its own
batch; the harness's OOM safety net splits it). Batches run across window boundaries. Every index
of the stream lands in exactly one batch, and the batches are a pure function of the sampler's
stream.

Unlike the first article's ``dynamic_batch_collate``, which catches the OOM in the collate function
(where no device memory is allocated, so it never fires) and silently drops the rest of the batch,
this plans each batch from its modelled cost before anything is loaded and drops nothing.

In DDP the ranks may get different numbers of batches per epoch; the harness must agree on step
counts.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from itertools import islice

import numpy as np

from strategies.params import flag, integer, number
from strategies.protocols import BatchingBase
from strategies.registry import register


class DynamicBatchSampler:
    def __init__(self, sampler, batch_cost: Callable[[list[int]], float], limit: float, max_batch: int,
                 min_batch: int, window: int, sort_key: np.ndarray | None) -> None:
        self.sampler, self.batch_cost, self.limit = sampler, batch_cost, limit
        self.max_batch, self.min_batch, self.window = max_batch, min_batch, window
        self.sort_key = None if sort_key is None else np.asarray(sort_key)
        self._len_cache: tuple[object, int] | None = None

    def _stream(self) -> Iterator[int]:
        it = iter(self.sampler)
        if not self.window or self.sort_key is None:
            yield from it
            return
        while chunk := list(islice(it, self.window)):
            for p in np.argsort(self.sort_key[chunk], kind="stable"):
                yield chunk[p]

    def __iter__(self) -> Iterator[list[int]]:
        batch: list[int] = []
        for i in self._stream():
            if batch and (len(batch) >= self.max_batch or (
                    len(batch) >= self.min_batch and self.batch_cost(batch + [i]) > self.limit)):
                yield batch
                batch = []
            batch.append(i)
        if batch:
            yield batch

    def __len__(self) -> int:
        """Exact: the number of batches the next iteration yields, found by a dry run of the
        packing.

        Exact when the sampler's order is a pure function of its state (DistributedSampler,
        balanced); memoised per sampler epoch when the sampler has an ``epoch`` attribute.
        """
        epoch = getattr(self.sampler, "epoch", None)
        if epoch is not None and self._len_cache is not None and self._len_cache[0] == epoch:
            return self._len_cache[1]
        n = sum(1 for _ in self)
        if epoch is not None:
            self._len_cache = (epoch, n)
        return n


@register("batching", "dynamic")
class DynamicBatching(BatchingBase):
    """``max_batch`` 0 means 4 x batch_size; ``bucket_window`` 0 means 8 x batch_size."""

    splits_on_oom = True  # the training step's safety net splits a batch that does not fit

    def __init__(self, max_batch: int = 0, min_batch: int = 1, bucket: bool = True, bucket_window: int = 0,
                 budget_fraction: float = 0.9) -> None:
        self.max_batch, self.min_batch = integer("max_batch", max_batch, 0), integer("min_batch", min_batch, 1)
        if max_batch and min_batch > max_batch:
            raise ValueError(f"min_batch {min_batch} exceeds max_batch {max_batch}")
        self.bucket, self.bucket_window = flag("bucket", bucket), integer("bucket_window", bucket_window, 0)
        self.budget_fraction = number("budget_fraction", budget_fraction, 0, 1, low_open=True)

    def check_training(self, batch_size: int, **_settings) -> None:
        """At load time (strategies.registry.check_training): min_batch fits under the max_batch
        this batch_size gives."""
        if self.min_batch > (self.max_batch or 4 * batch_size):
            raise ValueError(f"min_batch = {self.min_batch} exceeds max_batch = {self.max_batch or 4 * batch_size}"
                             + ("" if self.max_batch else f" (max_batch 0 means 4 x batch_size {batch_size})")
                             + f"; lower min_batch or set max_batch >= {self.min_batch}")

    def batch_sampler(self, sampler, batch_size: int, *, batch_cost: Callable[[list[int]], float],
                      budget: float, sort_key: np.ndarray | None = None, **_context) -> DynamicBatchSampler:
        max_batch = self.max_batch or 4 * batch_size
        self.check_training(batch_size)
        window = (self.bucket_window or 8 * batch_size) if self.bucket else 0
        return DynamicBatchSampler(sampler, batch_cost, budget * self.budget_fraction, max_batch,
                                   self.min_batch, window, sort_key)
