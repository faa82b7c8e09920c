"""Feedback-controlled batch size (the second article's DynamicBatchSampler, for comparison, minus
its bugs).

The batch size starts at ``batch_size``. The training loop reports the device-memory use of each
step by calling ``observe(memory_fraction)`` (used / capacity; report > 1 after an OOM) on the
strategy, which forwards it to the batch sampler it built last (the batch sampler's own ``observe``
works too). When the next batch is started, the latest unconsumed report is applied once: below
``low`` the size doubles (up to ``max_batch``), above ``high`` it halves (down to ``min_batch``);
with no new report the size stays. Every index of the sampler's stream lands in exactly one batch;
the last batch of an epoch may be short. The size carries over from one epoch to the next.

Lag: with DataLoader workers the batch sampler runs in the main process and the loader builds
``prefetch_factor * num_workers`` batches ahead, so a report takes effect only that many batches
later (with ``num_workers=0``, on the very next batch). The controller therefore overshoots; this
is a real property of the seed's design and what the benchmark measures.

Bugs of the seed avoided: its ``range(0, n, self.current_batch_size)`` froze the step, so
adjustments never took effect within an epoch; it never shrank below the starting size; its memory
reading was a constant stub; it shuffled with the unseeded global ``random`` and ignored the
distributed sampler; it had no ``__len__`` and printed in the hot loop.
"""
from __future__ import annotations

import math
from collections.abc import Iterator

from strategies.params import integer, number
from strategies.protocols import BatchingBase
from strategies.registry import register


class AdaptiveBatchSampler:
    def __init__(self, sampler, batch_size: int, min_batch: int, max_batch: int, low: float,
                 high: float) -> None:
        self.sampler, self.size = sampler, batch_size
        self.min_batch, self.max_batch, self.low, self.high = min_batch, max_batch, low, high
        self._reading: float | None = None

    def observe(self, memory_fraction: float) -> None:
        """Report the device-memory use (fraction of capacity) of the step just taken."""
        self._reading = float(memory_fraction)

    def _adjust(self) -> None:
        reading, self._reading = self._reading, None
        if reading is None:
            return
        if reading < self.low:
            self.size = min(self.size * 2, self.max_batch)
        elif reading > self.high:
            self.size = max(self.size // 2, self.min_batch)

    def __iter__(self) -> Iterator[list[int]]:
        batch: list[int] = []
        self._adjust()
        for i in self.sampler:
            batch.append(i)
            if len(batch) >= self.size:
                yield batch
                batch = []
                self._adjust()  # runs when the loader asks for the next batch
        if batch:
            yield batch

    def __len__(self) -> int:
        """Deterministic estimate: batches of an epoch at the current size (exact if no report
        changes it)."""
        return math.ceil(len(self.sampler) / self.size)


@register("batching", "adaptive")
class AdaptiveBatching(BatchingBase):
    """``min_batch`` 0 means max(1, batch_size // 4); ``max_batch`` 0 means 4 x batch_size."""

    def __init__(self, min_batch: int = 0, max_batch: int = 0, low: float = 0.6, high: float = 0.85) -> None:
        self.min_batch, self.max_batch = integer("min_batch", min_batch, 0), integer("max_batch", max_batch, 0)
        if min_batch and max_batch and min_batch > max_batch:
            raise ValueError(f"min_batch {min_batch} exceeds max_batch {max_batch}")
        self.low, self.high = number("low", low, 0), number("high", high, 0)
        if not low < high:
            raise ValueError(f"need low < high, got low={low} high={high}")
        self._built: AdaptiveBatchSampler | None = None  # the batch sampler observe() reports to

    def limits(self, batch_size: int) -> tuple[int, int]:
        """(min_batch, max_batch) for this batch size, the defaults filled in."""
        return self.min_batch or max(1, batch_size // 4), self.max_batch or 4 * batch_size

    def check_training(self, batch_size: int, **_settings) -> None:
        """At load time (strategies.registry.check_training): the starting batch_size lies between
        min_batch and max_batch."""
        min_batch, max_batch = self.limits(batch_size)
        if min_batch > batch_size:
            raise ValueError(f"min_batch = {min_batch} exceeds the starting batch_size {batch_size}; lower "
                             f"min_batch to {batch_size} or less (0: batch_size // 4)")
        if max_batch < batch_size:
            raise ValueError(f"max_batch = {max_batch} is below the starting batch_size {batch_size}; raise "
                             f"max_batch to {batch_size} or more (0: 4 x batch_size)")

    def batch_sampler(self, sampler, batch_size: int, **_context) -> AdaptiveBatchSampler:
        min_batch, max_batch = self.limits(batch_size)
        self.check_training(batch_size)
        self._built = AdaptiveBatchSampler(sampler, batch_size, min_batch, max_batch, self.low, self.high)
        return self._built

    def observe(self, memory_fraction: float) -> None:
        """Report the device-memory use of the step just taken to the batch sampler built last."""
        if self._built is not None:
            self._built.observe(memory_fraction)
