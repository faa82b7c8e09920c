"""The shard-streaming sampler: DistributedSampler's contract (every index once per epoch across ranks plus
torch's padding, equal lengths, order a pure function of (seed, epoch)) and its locality (whole shards)."""
from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strategies import registry
from strategies.protocols import EpochSampler, Sampler
from strategies.sampler.shards import ShardStreamSampler, buffer_shuffle, checked_shards, fixed_shards

cases = st.fixed_dictionaries({
    "size": st.integers(0, 400), "world": st.integers(1, 8), "shard_size": st.integers(1, 64),
    "buffer_size": st.integers(1, 100), "seed": st.integers(0, 2**31), "epoch": st.integers(0, 50)})


def epoch_of(c: dict, epoch: int | None = None, shards=None) -> list[list[int]]:
    strategy = registry.create("sampler", "shards", shard_size=c["shard_size"], buffer_size=c["buffer_size"])
    out = []
    for rank in range(c["world"]):
        s = strategy.sampler(c["size"], c["world"], rank, c["seed"], None, 8, shards=shards)
        s.set_epoch(c["epoch"] if epoch is None else epoch)
        out.append(list(s))
        assert len(s) == len(out[-1])
        assert all(isinstance(i, int) for i in out[-1])
    return out


def check_contract(per_rank: list[list[int]], size: int, world: int) -> None:
    total_size = math.ceil(size / world) * world
    assert {len(r) for r in per_rank} == {total_size // world}  # equal steps per rank
    counts = Counter(i for r in per_rank for i in r)
    assert set(counts) == set(range(size))  # every index, nothing outside
    assert sum(counts.values()) - size == total_size - size  # the extra occurrences are exactly torch's padding
    if size:
        assert max(counts.values()) <= math.ceil(total_size / size)  # padding repeats spread like torch's


@settings(max_examples=200, deadline=None)
@given(c=cases)
def test_contract(c):
    per_rank = epoch_of(c)
    check_contract(per_rank, c["size"], c["world"])
    assert epoch_of(c) == per_rank  # rebuilt samplers: the same order


@settings(max_examples=100, deadline=None)
@given(c=cases, data=st.data())
def test_contract_with_the_storages_own_shards(c, data):
    """Shards of unequal sizes passed by the caller (a storage's shards(path)) keep the contract."""
    size = max(c["size"], 1)
    cuts = sorted(set(data.draw(st.lists(st.integers(1, size - 1), max_size=20)))) if size > 1 else []
    bounds = [0, *cuts, size]
    shards = [range(a, b) for a, b in zip(bounds, bounds[1:])]
    c = dict(c, size=size)
    per_rank = epoch_of(c, shards=shards)
    check_contract(per_rank, size, c["world"])


@pytest.mark.parametrize("size, world, shard_size", [(1000, 4, 50), (999, 3, 64), (513, 8, 16), (64, 2, 64)])
def test_ranks_read_whole_shards_in_stream_order(size, world, shard_size):
    """With buffer_size=1 a rank's order is its shard stream: runs of whole shards in index order; only the
    shard at each end of a rank's slice is shared with a neighbour."""
    c = {"size": size, "world": world, "shard_size": shard_size, "buffer_size": 1, "seed": 5, "epoch": 3}
    per_rank = epoch_of(c)
    check_contract(per_rank, size, world)
    n = math.ceil(size / world)
    for order in per_rank:
        touched = [i // shard_size for i in order if i < size]
        runs = [k for j, k in enumerate(touched) if j == 0 or k != touched[j - 1]]
        assert len(runs) == len(set(runs))  # a shard is read in one run
        assert len(set(runs)) <= math.ceil(n / shard_size) + 1
        for a, b in zip(order, order[1:]):  # within a run: consecutive indices
            if a // shard_size == b // shard_size:
                assert b == a + 1
    # whole shards: each shard is split between at most two (neighbouring) ranks
    owners = {}
    for rank, order in enumerate(per_rank):
        for i in order[: max(0, size - rank * n)]:  # the padding lies past position size of the stream
            owners.setdefault(i // shard_size, set()).add(rank)
    assert sum(len(o) > 1 for o in owners.values()) <= world - 1


def test_buffer_shuffles_within_a_window_only():
    """An element leaves the buffer no earlier than buffer_size - 1 positions before its stream position."""
    stream = np.arange(1000)
    for buffer_size in (1, 2, 16, 100, 2000):
        out = buffer_shuffle(stream, buffer_size, np.random.default_rng(0))
        assert sorted(out) == list(range(1000))
        pos = {v: p for p, v in enumerate(out)}
        assert all(pos[v] >= v - (buffer_size - 1) for v in range(1000))
        if buffer_size == 1:
            assert out == list(range(1000))
        else:
            assert out != list(range(1000))
    # a bigger buffer mixes further: the mean displacement grows
    disp = [np.mean(np.abs(np.array(buffer_shuffle(stream, b, np.random.default_rng(1))) - stream))
            for b in (4, 64, 512)]
    assert disp[0] < disp[1] < disp[2]


def test_epochs_reshuffle_shards_and_buffers():
    c = {"size": 600, "world": 3, "shard_size": 50, "buffer_size": 32, "seed": 11, "epoch": 0}
    e0, e1 = epoch_of(c, 0), epoch_of(c, 1)
    assert e0 != e1 and sorted(sum(e0, [])) == sorted(sum(e1, [])) == list(range(600))
    first_shards = {tuple(sorted({i // 50 for i in r[:40]})) for r in e0}
    first_shards_1 = {tuple(sorted({i // 50 for i in r[:40]})) for r in e1}
    assert first_shards != first_shards_1  # the shard order changed, not just the buffer
    s = registry.create("sampler", "shards", shard_size=50, buffer_size=32).sampler(600, 3, 2, 11, None, 8)
    s.set_epoch(1)
    assert list(s) == e1[2] and list(s) == e1[2]  # same epoch, same order, on every iteration
    other_seed = epoch_of(dict(c, seed=12), 1)
    assert other_seed != e1


def test_protocol_members_and_parameters():
    strategy = registry.create("sampler", "shards")
    assert isinstance(strategy, Sampler) and strategy.cost == "auto" and strategy.uses_shards
    assert (strategy.shard_size, strategy.buffer_size) == (64, 128)
    s = strategy.sampler(10, 2, 1, 0, np.ones(10), 2)  # the protocol's positional call
    assert isinstance(s, EpochSampler) and len(s) == 5
    for key in ("shard_size", "buffer_size"):
        with pytest.raises(ValueError, match=f"{key} must be an integer >= 1, got 0"):
            registry.create("sampler", "shards", **{key: 0})
    registry.validate("sampler", "shards", {"shard_size": 64, "buffer_size": 128})
    with pytest.raises(registry.InvalidParams, match="has no parameter 'shardsize'"):
        registry.validate("sampler", "shards", {"shardsize": 64})
    with pytest.raises(ValueError, match="rank 2 is not in"):
        ShardStreamSampler(10, 2, 2, 0, 4, 4)


def test_shards_passed_in_must_tile_the_index_space():
    assert fixed_shards(10, 4) == [range(0, 4), range(4, 8), range(8, 10)]
    assert checked_shards([range(0, 3), range(3, 10)], 10) == [range(0, 3), range(3, 10)]
    for bad in ([range(0, 3), range(4, 10)], [range(0, 3), range(3, 9)], [range(0, 0), range(0, 10)],
                [range(0, 10, 2)], [(0, 10)]):
        with pytest.raises(ValueError):
            checked_shards(bad, 10)


def test_storage_shards_match_the_default_shard_ranges(tmp_path):
    """A webdataset storage with shard_size S and the sampler with shard_size S agree on shard boundaries."""
    from harness.data.generator import DatasetSpec, iter_samples

    spec = DatasetSpec(samples=37, seed=1, profile="tiny")
    for name, key in (("webdataset", "shard_size"), ("parquet", "row_group_size")):
        storage = registry.create("storage", name, **{key: 8})
        storage.write(iter_samples(spec), tmp_path / name, spec.samples)
        assert storage.shards(tmp_path / name) == fixed_shards(37, 8)
