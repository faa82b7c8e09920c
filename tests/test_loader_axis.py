"""The loader and preprocess axes without rank processes: the thread loader keeps the batch sampler's
batches and order, its CPU is the loader's; device preprocessing hands over JPEG bytes; cell ids omit the
new axes at their defaults so older baselines still match."""
from __future__ import annotations

import io
import random
import time

import numpy as np
import pytest
import torch
from PIL import Image

from harness.config.matrix import Cell
from harness.config.scenario import StrategyChoice
from harness.data.decoders import decode_resize
from harness.gates.baseline import _params_differ
from harness.measure.rankrecord import RankRecord
from harness.results import metrics
from harness.results.baselinefile import BaselineCell
from harness.train.devprep import DevicePrep
from harness.train.torchdataset import Collate, SampleDataset
from strategies import registry
from strategies.protocols import LoaderInputs
from strategies.sample import Sample


class SlowDataset:
    threaded = False

    def __getitems__(self, indices):
        time.sleep(0.002 * (indices[0] % 3))  # uneven: later batches may finish first
        return [{"i": i} for i in indices]

    def for_threads(self):
        self.threaded = True
        return self


@pytest.mark.parametrize("kind", ["threads", "nodes", "spdl"])
def test_thread_loader_yields_every_batch_once_in_order(kind):
    """The in-process loaders (ours, torchdata.nodes', SPDL's) keep the sampler contract: every batch once,
    in the batch sampler's order, though later batches may finish first; their threads' CPU is counted."""
    pytest.importorskip({"threads": "torch", "nodes": "torchdata.nodes", "spdl": "spdl.pipeline"}[kind])
    batches = [[i, i + 1] for i in range(0, 40, 2)]
    strategy, dataset = registry.create("loader", kind, threads=3, prefetch=2), SlowDataset()
    loader = strategy.pipeline(LoaderInputs(dataset, batches, lambda items: [it["i"] for it in items], workers=1,
                                            prefetch_factor=2, persistent_workers=False, pin=False))
    assert strategy.in_process and dataset.threaded  # the dataset made safe for the loader's threads
    assert list(loader) == batches and len(loader) == 20
    assert loader.cpu_s > 0
    it = iter(loader)
    next(it)
    it.close()  # a cell that stops early: the pool shuts down without error


def test_thread_loader_cpu_counts_as_the_loaders_not_the_ranks():
    record = RankRecord(loader="threads", loader_cpu_s=2.0, loader_thread_cpu_s=2.0, rank_cpu_s=5.0, workers=1,
                        wait=[0.1])
    assert metrics._cpu_s(record) == (2.0, 3.0)


def _jpeg(w: int, h: int) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (w, h), (200, 10, 10)).save(buf, "JPEG")
    return buf.getvalue()


class Reader:
    def __init__(self, sizes):
        self.samples = [Sample(index=i, jpeg=_jpeg(w, h), caption="a red square") for i, (w, h) in
                        enumerate(sizes)]

    def __len__(self):
        return len(self.samples)

    def read_batch(self, indices):
        return [self.samples[i] for i in indices]


def test_device_preprocess_hands_over_jpeg_bytes_and_the_rank_knows_the_pixels():
    sizes = [(80, 40), (40, 60)]
    ds = SampleDataset(Reader(sizes), "pixels", 32, preprocess=registry.create("preprocess", "device"))
    batch = Collate()(ds.__getitems__([0, 1]))
    assert "images" not in batch and [len(j) for j in batch["jpegs"]] == [len(_jpeg(w, h)) for w, h in sizes]
    resized = np.array([[16, 32], [32, 21]])
    sides = np.array([[40, 80], [60, 40]])
    DevicePrep(resized, sides, flip=True).annotate(batch)
    assert batch["padded_pixels"] == 2 * 32 * 32 and batch["real_pixels"] == 16 * 32 + 32 * 21
    assert batch["source_pixels"] == 40 * 80 + 60 * 40


def _gradient_jpeg(w: int, h: int) -> bytes:
    """An image that a mirror changes: red rises left to right."""
    pixels = np.zeros((h, w, 3), dtype=np.uint8)
    pixels[..., 0] = np.linspace(40, 250, w, dtype=np.uint8)[None, :]
    pixels[..., 1] = 90
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, "JPEG", quality=95)
    return buf.getvalue()


class GradientReader(Reader):
    def __init__(self, sizes):
        self.samples = [Sample(index=i, jpeg=_gradient_jpeg(w, h), caption="a red ramp") for i, (w, h) in
                        enumerate(sizes)]


def test_host_preprocess_mirrors_the_drawn_flips_in_the_collate_and_normalises_when_asked():
    """The flips are drawn per sample after the cache (the items stay as decoded) and done by the collate's
    copy into the batch: a flipped slot holds the decoded image mirrored, the padding around it zeros."""
    sizes = [(40, 20), (24, 36), (40, 20), (30, 40), (20, 40), (40, 30)]
    ds = SampleDataset(GradientReader(sizes), "pixels", 16, preprocess=registry.create("preprocess", "host"),
                       decoder="pil")
    random.seed(1)
    items = ds.__getitems__(list(range(len(sizes))))
    random.seed(1)
    assert items.flips == [random.random() < 0.5 for _ in sizes] and len(set(items.flips)) == 2
    batch = Collate()(items)
    images = batch["images"]
    assert images.shape == (6, 3, 16, 16) and images.is_contiguous(memory_format=torch.channels_last)
    for i, flip in enumerate(items.flips):
        decoded = decode_resize(ds.reader.samples[i].jpeg, 16, "pil")
        assert np.array_equal(items[i]["image"], decoded)  # the item (what a decoded cache keeps) unmirrored
        h, w, _ = decoded.shape
        slot = images[i].permute(1, 2, 0).numpy()
        assert np.array_equal(slot[:h, :w], decoded[:, ::-1] if flip else decoded), (i, flip)
        assert not slot[h:].any() and not slot[:, w:].any()
    ds = SampleDataset(Reader([(40, 20)]), "pixels", 16, preprocess=registry.create("preprocess", "host",
                                                                                    normalise=True))
    batch = Collate(normalise=True)(ds.__getitems__([0]))
    assert batch["images"].dtype == torch.float32 and batch["images"].shape == (1, 3, 8, 16)


def test_cell_ids_omit_the_new_axes_at_their_defaults():
    def cell(**extra):
        names = dict(registry.DEFAULTS, **extra)
        return Cell(tuple(StrategyChoice(a, names[a]) for a in registry.AXES))

    assert cell().id == "storage=raw,cache=none,batching=fixed,sampler=default"
    assert cell(precision="fp32", loader="threads").id.endswith(",precision=fp32,loader=threads")
    old = BaselineCell(params={"storage": {}, "cache": {}, "batching": {}, "sampler": {}})
    new = BaselineCell(params={a: {} for a in registry.AXES})
    assert _params_differ(new, old) is None
