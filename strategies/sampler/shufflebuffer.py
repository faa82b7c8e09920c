"""Shuffle-buffer sampler: a streaming reader's samples in storage order, mixed by a bounded
in-memory buffer.

What a streaming loader does when it reads its data front to back (a tar stream, a parquet file,
litdata chunks in order) and shuffles only through a buffer: each rank streams one contiguous slice
of the storage, in index order (the epoch padded to a multiple of the world size by repeating its
beginning, as torch pads), and the rank's buffer of ``size`` samples mixes it: fill the buffer,
emit a random element, put the next sample in its place, then drain the rest in random order
(seeded by (seed, epoch, rank); ``size = 1`` is the stream itself). The slices rotate by one rank
per epoch, so over W epochs every rank streams every slice.

A sample moves at most about ``size`` places earlier than its place in the stream (and, in
expectation, by a few buffer lengths later), so the order stays correlated with storage whenever
``size`` is small against a rank's slice: the order figures (harness.results.orderquality) measure
how large a buffer closes the gap to a shuffle, and the buffer's memory is ``size`` samples per
rank. Unlike the ``shards`` sampler, the shard order is not shuffled first: this is the harder case
for a buffer, storage order itself.

Contract (DistributedSampler's): every index once per epoch across ranks plus exactly torch's
padding, equal ``len`` on every rank, the order a pure function of (seed, epoch) for a given rank
and world size.
"""
from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from strategies.params import integer
from strategies.protocols import SamplerBase
from strategies.registry import register
from strategies.sampler.epochs import DistributedEpochs
from strategies.sampler.shards import buffer_shuffle


class BufferedStreamSampler(DistributedEpochs):
    def __init__(self, size: int, num_replicas: int, rank: int, seed: int, buffer: int) -> None:
        super().__init__(size, num_replicas, rank, seed)
        self.buffer = buffer

    def rank_stream(self) -> np.ndarray:
        """This epoch's slice of the padded storage-order stream, before the buffer."""
        stream = np.arange(self.size, dtype=np.int64)
        if self.total_size > self.size and self.size:
            stream = np.concatenate([stream, np.resize(stream, self.total_size - self.size)])
        part = (self.rank + self.epoch) % self.num_replicas
        return stream[part * self.num_samples:(part + 1) * self.num_samples]

    def __iter__(self) -> Iterator[int]:
        rng = np.random.default_rng([self.seed, self.epoch, self.rank, 2])
        return iter(buffer_shuffle(self.rank_stream(), self.buffer, rng))


@register("sampler", "shufflebuffer")
class ShuffleBufferSampler(SamplerBase):
    """``size``: samples in each rank's shuffle buffer (1: storage order, no shuffle)."""

    def __init__(self, size: int = 256) -> None:
        self.size = integer("size", size, 1)

    def sampler(self, size: int, num_replicas: int, rank: int, seed: int, costs=None,
                batch_size: int = 1) -> BufferedStreamSampler:
        """``costs`` and ``batch_size`` are not used."""
        return BufferedStreamSampler(size, num_replicas, rank, seed, self.size)
