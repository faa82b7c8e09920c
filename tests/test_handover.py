"""How a batch is made and handed over (harness.train.handover): a worker's shared arenas are reused only once
the rank has dropped what it received in them, a reused arena's padding is written again, small tensors cross
in the pickle; the rank process's arenas are reused only once no tensor on them is left."""
from __future__ import annotations

import io
import pickle
from multiprocessing.reduction import ForkingPickler

import numpy as np
import pytest
import torch
from PIL import Image

from harness.train import handover
from harness.train.handover import BatchAlloc, ByValue, LocalPool, SlabPool, SlabTensor, hand_over
from harness.train.torchdataset import Collate, SampleDataset
from strategies import registry
from strategies.sample import Sample


def _jpeg(w: int, h: int, seed: int) -> bytes:
    rng = np.random.default_rng(seed)  # no zero pixel: the padding is told from the image
    pixels = rng.integers(60, 250, (h, w, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, "PNG")  # lossless, decoded the same everywhere
    return buf.getvalue()


class Reader:
    """Images whose shapes vary, so that the batches' padded sizes do too (a reused arena held a larger one)."""

    def __init__(self, n: int = 96):
        rng = np.random.default_rng(0)
        sides = rng.integers(6, 33, (n, 2))
        self.samples = [Sample(index=i, jpeg=_jpeg(int(w), int(h), i), caption="a b c") for i, (w, h) in
                        enumerate(sides)]

    def __len__(self):
        return len(self.samples)

    def read_batch(self, indices):
        return [self.samples[i] for i in indices]


class ArenaCount(Collate):
    """The collate, then how many arenas this worker's pool holds."""

    def __call__(self, items):
        batch = super().__call__(items)
        batch["arenas"] = len(handover.worker_pool().slabs)
        return batch


def _dataset():
    return SampleDataset(Reader(), "pixels", 32, preprocess=registry.create("preprocess", "host", flip=False),
                         decoder="pil")


def _same(a: dict, b: dict) -> bool:
    return all(torch.equal(a[k], b[k]) for k in ("index", "images", "tokens"))


@pytest.mark.slow
@pytest.mark.parametrize("normalise", [False, True])  # True: the host normalisation replaces the uint8 images
def test_a_workers_batches_equal_the_in_process_ones_its_arenas_reused_and_kept_ones_left_alone(normalise):
    """With normalise the arenas were taken for good (16 mappings, 32 fds against 4 and 10): reuse holds on
    every transform path."""
    from torch.utils.data import DataLoader

    ds = _dataset()
    batches = [list(range(k, 96, 12))[:6] for k in range(12)] * 3
    want = [Collate(normalise)(ds.__getitems__(b)) for b in batches]
    loader = DataLoader(ds, batch_sampler=batches, num_workers=1, collate_fn=ArenaCount(normalise),
                        prefetch_factor=2, multiprocessing_context="forkserver")
    kept, arenas = [], []
    for i, batch in enumerate(loader):
        assert _same(batch, want[i]), i  # a reused arena: the padding of an earlier, larger batch is gone
        arenas.append(batch["arenas"])
        if i < 4:
            kept.append(batch)  # the rank keeps these: their arenas must not be written again
    assert all(_same(b, want[i]) for i, b in enumerate(kept))
    # the kept four, the one in hand and the one before it, two prefetched, one being made: the pool stops
    # growing there once the rank drops batches (36 batches would fill it, POOL_SIZE, if none were reused)
    assert max(arenas) <= 10 < handover.POOL_SIZE < len(batches), arenas


def test_large_tensors_cross_in_an_arena_freed_when_the_receiver_drops_them_small_ones_by_value():
    pool = SlabPool()
    handover._POOL.update(pid=handover.os.getpid(), pool=pool)  # this process's pool, fresh
    alloc = BatchAlloc(shared=True)
    images = alloc((4, 64, 64, 3), torch.uint8)
    images.copy_(torch.randint(1, 255, images.shape, dtype=torch.uint8))
    batch = {"images": images.permute(0, 3, 1, 2), "index": torch.arange(4), "jpegs": [torch.ones(5)], "n": 4}
    hand_over(batch, alloc)
    assert isinstance(batch["images"], SlabTensor) and isinstance(batch["index"], ByValue)
    assert isinstance(batch["jpegs"][0], ByValue) and batch["n"] == 4
    buf = io.BytesIO()
    ForkingPickler(buf).dump(batch)
    got = pickle.loads(buf.getvalue())  # what the rank does (here the same process: its own resource sharer)
    assert torch.equal(got["images"], images.permute(0, 3, 1, 2)) and torch.equal(got["index"], torch.arange(4))
    assert got["images"].stride() == images.permute(0, 3, 1, 2).stride()
    slab = pool.slabs[0]
    view = got["images"][1:]
    del got
    assert not slab.free()  # a view of the received tensor still holds the arena
    del view
    assert slab.free()
    again, reused = pool.take(4 * 64 * 64 * 3)
    assert again is slab and reused


def test_the_rank_process_arenas_are_reused_only_when_no_tensor_is_left_on_them():
    pool = LocalPool()
    first, reused = pool.tensor((8, 8), torch.uint8)
    assert not reused and not first.any()
    first.fill_(7)
    view = first[2:]
    del first
    second, _ = pool.tensor((8, 8), torch.uint8)
    assert len(pool.arenas) == 2 and not second.any()  # a view held the first arena
    del view
    third, reused = pool.tensor((4, 8), torch.uint8)
    assert reused and len(pool.arenas) == 2 and not third.any()  # zeroed when asked
    third.fill_(3)
    del third
    fourth, reused = pool.tensor((4, 8), torch.uint8, zero=False)
    assert reused and int(fourth[0, 0]) == 3  # not zeroed: the caller writes every byte
