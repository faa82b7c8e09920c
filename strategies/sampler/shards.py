"""Shard-streaming sampler: what production loaders for sharded formats do (WebDataset, streaming
Parquet).

Each epoch, the shards (contiguous index ranges) are put in an order shuffled by (seed, epoch) and
laid end to end; within a shard the samples stay in index order, so a storage reads them
sequentially. The stream is padded to a multiple of the world size exactly as DistributedSampler
pads its permutation (by repeating its beginning), and rank r takes the contiguous slice [r * n, (r
+ 1) * n) of it, n = ceil(size / world). So a rank reads whole shards, except at most one shard at
each end of its slice that it shares with its neighbour rank, and every rank gets the same number
of samples (hence the same number of fixed batches). Each rank then shuffles its slice through a
buffer of ``buffer_size`` samples (fill the buffer, emit a random element of it, put the next
sample in its place), seeded by (seed, epoch, rank); ``buffer_size = 1`` keeps the stream order.

In this harness the sampler only orders indices: the storage then reads them in that order, so a
buffer of B samples makes a rank read within a window of about B / shard_size + 1 consecutive
shards (a streaming loader reads those sequentially into memory and shuffles there). The page cache
holds that window for tar and flat files; the parquet reader keeps ``cached_groups`` decoded row
groups, which should cover it.

Contract (DistributedSampler's): every index once per epoch across ranks plus exactly the padding
torch adds (``ceil(size / world) * world - size`` repeats), equal ``len`` on every rank, and the
order a pure function of (seed, epoch) for a given rank and world size. The multiset differs from
DistributedSampler's only in which indices are repeated as padding.

Shards: by default the ranges ``[k * shard_size, (k + 1) * shard_size)``, which are exactly the tar
shards of the ``webdataset`` storage and the row groups of ``parquet`` when their ``shard_size`` /
``row_group_size`` is the same (both write samples in index order), and fixed-size index ranges for
storages without shards (``raw``, ``mmap``, ``hdf5``, ``lmdb``). A caller that knows the storage's
real shards passes them as ``shards=`` (a storage with shards has a ``shards(path) -> list[range]``
method); then ``shard_size`` is not used. ``uses_shards = True`` declares that this sampler accepts
them.
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

from strategies.params import integer
from strategies.protocols import SamplerBase
from strategies.registry import register
from strategies.sampler.epochs import DistributedEpochs


def fixed_shards(size: int, shard_size: int) -> list[range]:
    """Contiguous ranges of ``shard_size`` indices (the last may be shorter) covering 0..size-1."""
    return [range(a, min(a + shard_size, size)) for a in range(0, size, shard_size)]


def checked_shards(shards: Sequence[range], size: int) -> list[range]:
    """The shards as a list, or ValueError unless they are non-empty, step-1 ranges tiling
    0..size-1 in order."""
    out, end = [], 0
    for k, r in enumerate(shards):
        if not isinstance(r, range) or r.step != 1 or len(r) == 0 or r.start != end:
            raise ValueError(f"shard {k} ({r!r}) does not continue the previous one at index {end}: shards "
                             f"must be non-empty contiguous ranges covering 0..{size - 1} in order")
        out.append(r)
        end = r.stop
    if end != size:
        raise ValueError(f"the shards cover 0..{end - 1}, the dataset has {size} samples")
    return out


def shard_stream(shards: list[range], size: int, total_size: int, seed: int, epoch: int) -> np.ndarray:
    """int64[total_size]: the shards in a (seed, epoch)-shuffled order, end to end, padded like
    torch."""
    if size == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.random.default_rng([seed, epoch]).permutation(len(shards))
    stream = np.concatenate([np.arange(shards[k].start, shards[k].stop, dtype=np.int64) for k in order])
    pad = total_size - size
    if pad:
        stream = np.concatenate([stream, np.resize(stream, pad)])  # repeat the beginning, as torch pads
    return stream


def buffer_shuffle(items: np.ndarray, buffer_size: int, rng: np.random.Generator) -> list[int]:
    """Shuffle a stream through a buffer: emit a random buffered element, replace it with the next
    one."""
    if buffer_size <= 1 or len(items) <= 1:
        return items.tolist()
    stream = items.tolist()
    buf = stream[:buffer_size]
    out = []
    picks = rng.integers(0, 2**62, size=len(stream))  # one draw per output, reduced modulo the buffer size
    p = 0
    for nxt in stream[buffer_size:]:
        j = int(picks[p] % len(buf))
        p += 1
        out.append(buf[j])
        buf[j] = nxt
    out.extend(buf[j] for j in rng.permutation(len(buf)).tolist())  # drain: the remainder in random order
    return out


class ShardStreamSampler(DistributedEpochs):
    def __init__(self, size: int, num_replicas: int, rank: int, seed: int, shard_size: int, buffer_size: int,
                 shards: Sequence[range] | None = None) -> None:
        super().__init__(size, num_replicas, rank, seed)
        self.buffer_size = buffer_size
        self.shards = checked_shards(shards, size) if shards is not None else fixed_shards(size, shard_size)

    def rank_stream(self) -> np.ndarray:
        """This rank's slice of the epoch's shard stream, before the buffer shuffle."""
        stream = shard_stream(self.shards, self.size, self.total_size, self.seed, self.epoch)
        return stream[self.rank * self.num_samples:(self.rank + 1) * self.num_samples]

    def __iter__(self) -> Iterator[int]:
        rng = np.random.default_rng([self.seed, self.epoch, self.rank, 1])
        return iter(buffer_shuffle(self.rank_stream(), self.buffer_size, rng))


@register("sampler", "shards")
class ShardsSampler(SamplerBase):
    """``shard_size``: samples per shard when the caller passes no shards (match the storage's
    shard_size or row_group_size); ``buffer_size``: samples in each rank's shuffle buffer (1: no
    shuffle)."""

    uses_shards = True  # sampler(..., shards=[range, ...]) takes the storage's own shards

    def __init__(self, shard_size: int = 64, buffer_size: int = 128) -> None:
        self.shard_size = integer("shard_size", shard_size, 1)
        self.buffer_size = integer("buffer_size", buffer_size, 1)

    def sampler(self, size: int, num_replicas: int, rank: int, seed: int, costs=None, batch_size: int = 1,
                shards: Sequence[range] | None = None) -> ShardStreamSampler:
        """``costs`` and ``batch_size`` are not used."""
        return ShardStreamSampler(size, num_replicas, rank, seed, self.shard_size, self.buffer_size, shards)
