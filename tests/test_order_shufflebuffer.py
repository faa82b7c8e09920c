"""The shuffle-buffer sampler: DistributedSampler's contract (every index once per epoch across ranks plus
torch's padding, equal lengths, the order a pure function of (seed, epoch)), and its mixing: the order figures
(harness.results.orderquality) come closer to a shuffle as the buffer grows."""
from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.results import orderquality as oq
from strategies import registry
from strategies.protocols import EpochSampler, Sampler


def epoch_of(size: int, world: int, buffer: int, seed: int, epoch: int) -> list[list[int]]:
    strategy = registry.create("sampler", "shufflebuffer", size=buffer)
    out = []
    for rank in range(world):
        s = strategy.sampler(size, world, rank, seed, None, 8)
        s.set_epoch(epoch)
        out.append(list(s))
        assert len(out[-1]) == len(s) and all(isinstance(i, int) for i in out[-1])
    return out


@settings(max_examples=150, deadline=None)
@given(size=st.integers(0, 300), world=st.integers(1, 8), buffer=st.integers(1, 100), seed=st.integers(0, 2**31),
       epoch=st.integers(0, 20))
def test_each_sample_once_per_epoch_plus_torchs_padding(size, world, buffer, seed, epoch):
    per_rank = epoch_of(size, world, buffer, seed, epoch)
    total = math.ceil(size / world) * world
    assert {len(r) for r in per_rank} == {total // world}
    counts = Counter(i for r in per_rank for i in r)
    assert set(counts) == set(range(size))  # every index, nothing outside
    assert sum(counts.values()) - size == total - size  # the repeats are exactly torch's padding
    assert epoch_of(size, world, buffer, seed, epoch) == per_rank  # rebuilt: the same order


def test_it_is_a_sampler_and_its_size_is_checked():
    strategy = registry.create("sampler", "shufflebuffer", size=8)
    assert isinstance(strategy, Sampler) and isinstance(strategy.sampler(10, 2, 0, 0), EpochSampler)
    with pytest.raises(registry.InvalidParams, match="size must be an integer >= 1"):
        registry.validate("sampler", "shufflebuffer", {"size": 0})


def test_size_one_streams_storage_order_and_the_slices_rotate():
    assert epoch_of(8, 2, 1, 0, 0) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert epoch_of(8, 2, 1, 0, 1) == [[4, 5, 6, 7], [0, 1, 2, 3]]
    assert epoch_of(8, 2, 4, 0, 0) != epoch_of(8, 2, 4, 0, 1)  # a new epoch, a new mix


def mixing(size: int, world: int, buffer: int, b: int = 16) -> oq.OrderFigures:
    orders = [oq.rank_order([r[i:i + b] for i in range(0, len(r), b)]) for r in epoch_of(size, world, buffer, 3, 0)]
    return oq.order_figures(orders, oq.layout(size, block=64, classes=np.arange(size) * 8 // size))


def test_a_larger_buffer_mixes_more():
    """One rank streams 4096 samples in storage order through buffers of 1, 16, 256, 1024 and 4096: rho falls,
    units met per batch and label mixing rise towards the shuffle's, and a buffer of the whole stream is decided
    as a shuffle on all three figures."""
    figures = [mixing(4096, 1, n) for n in (1, 16, 256, 1024, 4096)]
    rho = [f.position_rho for f in figures]
    units = [f.units_per_batch for f in figures]
    tv = [f.label_tv for f in figures]
    assert rho[0] == pytest.approx(1.0) and rho == sorted(rho, reverse=True)
    assert units[0] == 1.0 and units == sorted(units)
    assert tv[0] == pytest.approx(1 - 1 / 8) and tv == sorted(tv, reverse=True)
    assert all(w == oq.LESS_MIXED for w in figures[3].decisions().values())
    assert all(w == oq.AS_SHUFFLE for w in figures[-1].decisions().values())


def test_a_ranks_fixed_slice_stays_less_mixed_than_a_global_shuffle():
    """Two ranks, each its own half of the storage per epoch: a buffer of the whole slice shuffles it (rho as a
    shuffle) yet its batches hold only the half's classes (4 of 8 clusters): TV at least 1/2, less mixed."""
    f = mixing(4096, 2, 2048)
    assert f.decisions()["position"] == oq.AS_SHUFFLE and f.label_tv >= 0.5
    assert f.decisions()["labels"] == oq.LESS_MIXED and f.decisions()["units"] == oq.LESS_MIXED
