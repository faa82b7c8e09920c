"""The Dataset between reader and DataLoader: cache routing by level (stored samples vs decoded items),
worker-scope statistics attached to each batch, a shared cache asked by the rank, and collate."""
from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from harness.data.fields import MAX_TOKENS, tokenize
from harness.data.generator import DatasetSpec, generate_sample
from harness.train.torchdataset import SampleDataset, collate
from strategies import registry
from strategies.sample import Sample

SPEC = DatasetSpec(samples=6, profile="tiny")


class Reader:
    """Real generated samples; records every read_batch call."""

    def __init__(self):
        self.calls: list[list[int]] = []

    def __len__(self) -> int:
        return SPEC.samples

    def read_batch(self, indices) -> list[Sample]:
        self.calls.append(list(indices))
        return [generate_sample(SPEC, i) for i in indices]


def dataset(cache, workload: str = "pixels") -> tuple[SampleDataset, Reader]:
    reader = Reader()
    return SampleDataset(reader, workload, image_size=32, cache=cache), reader


@pytest.mark.parametrize("level, stored_type", [("stored", Sample), ("decoded", dict)])
def test_cache_level_decides_what_is_kept(level, stored_type):
    cache = registry.create("cache", "lru", capacity_mb=4, scope="worker", level=level)
    ds, reader = dataset(cache)
    first = ds.__getitems__([0, 1, 2])
    again = ds.__getitems__([2, 0])
    assert reader.calls == [[0, 1, 2]]  # the second batch came from the cache
    kept = [value for value, _ in ds._fetch.store._data.values()]
    assert kept and all(isinstance(v, stored_type) for v in kept)
    assert [it["index"] for it in again] == [2, 0]
    assert np.array_equal(again[1]["image"], first[0]["image"]) and again[1]["tokens"] == first[0]["tokens"]


def test_worker_scope_statistics_travel_with_each_batch():
    ds, _ = dataset(registry.create("cache", "lru", capacity_mb=4, scope="worker"))
    ds.__getitems__([0, 1])
    batch = ds.__getitems__([1, 3])
    stats = batch.cache_stats
    assert stats["key"] == f"pid{os.getpid()}" and stats["scope"] == "worker"
    assert (stats["hits"], stats["misses"]) == (1, 3)
    assert ds.shared_stats() is None  # a worker cache is never asked by the rank
    assert collate(batch)["cache_stats"] == stats


def test_no_cache_reads_storage_every_time_and_reports_nothing():
    for cache in (registry.create("cache", "none"), None):
        ds, reader = dataset(cache, "features")
        batch = ds.__getitems__([4, 4, 1])
        ds.__getitems__([4])
        assert reader.calls == [[4, 4, 1], [4]]
        assert batch.cache_stats is None and ds.shared_stats() is None


def test_shared_cache_is_asked_by_the_rank():
    cache = registry.create("cache", "lru", capacity_mb=4, scope="shared")
    try:
        ds, _ = dataset(cache, "features")
        batch = ds.__getitems__([0, 1])
        ds.__getitems__([0])
        assert batch.cache_stats is None  # not per batch: one round trip from the rank instead
        stats = ds.shared_stats()
        assert stats["key"] == "shared" and (stats["hits"], stats["misses"]) == (1, 2)
    finally:
        cache.close()


def test_collate_pads_pixels_to_the_largest_image():
    items = [{"index": 0, "nbytes": 10, "image": torch.ones(4, 6, 3, dtype=torch.uint8), "tokens": [5, 6]},
             {"index": 1, "nbytes": 20, "image": torch.full((5, 2, 3), 2, dtype=torch.uint8), "tokens": []}]
    batch = collate(items)
    assert batch["images"].shape == (2, 3, 5, 6)
    assert batch["padded_pixels"] == 2 * 5 * 6 and batch["real_pixels"] == 4 * 6 + 5 * 2
    assert batch["images"][0, :, 4, :].sum() == 0 and batch["images"][1, :, :, 2:].sum() == 0
    assert batch["images"][1, :, :5, :2].eq(2).all()
    assert batch["tokens"].shape == (2, MAX_TOKENS) and batch["tokens"][0, :3].tolist() == [5, 6, 0]
    assert batch["index"].tolist() == [0, 1] and batch["nbytes"] == 30 and batch["cache_stats"] is None


def test_collate_stacks_features():
    ds, _ = dataset(None, "features")
    batch = collate(ds.__getitems__([0, 2]))
    assert batch["image_emb"].shape[0] == 2 and batch["text_emb"].shape[0] == 2
    assert batch["padded_pixels"] == 0 and batch["real_pixels"] == 0


def test_tokenize_is_stable_and_in_vocabulary():
    assert tokenize("a cat on a mat") == tokenize("a cat on a mat")
    tokens = tokenize(" ".join(["w"] * 100))
    assert len(tokens) == MAX_TOKENS and all(t >= 1 for t in tokens)


def test_decoded_pixels_match_pil_draft_on_generated_jpegs():
    """The balanced sampler's pixels cost is what libjpeg really decodes under decode_resize's draft."""
    import io

    from PIL import Image

    from harness.data.decoders import decoded_pixels
    from harness.data.generator import DatasetSpec, generate_sample, image_sides

    spec = DatasetSpec(samples=40, seed=3, profile="cc3m", image_scale=1.0)
    for image_size in (64, 160):
        predicted = decoded_pixels(image_sides(spec), image_size)
        for i in range(spec.samples):
            img = Image.open(io.BytesIO(generate_sample(spec, i).jpeg))
            w, h = img.size
            scale = image_size / max(w, h)
            img.draft("RGB", (max(1, round(w * scale)), max(1, round(h * scale))))
            assert img.size[0] * img.size[1] == predicted[i], (i, image_size, (w, h), img.size)
    assert len(set(predicted.tolist())) > 10  # the cost varies between samples


def test_decoded_pixels_match_simplejpeg_scales():
    """With decoder = simplejpeg the cost is the pixels of the n/8 scale libjpeg-turbo really decodes."""
    import simplejpeg

    from harness.data.decoders import decoded_pixels, target_size
    from harness.data.generator import DatasetSpec, generate_sample, image_sides

    spec = DatasetSpec(samples=40, seed=3, profile="cc3m", image_scale=1.0)
    for image_size in (64, 160):
        predicted = decoded_pixels(image_sides(spec), image_size, "simplejpeg")
        for i in range(spec.samples):
            jpeg = generate_sample(spec, i).jpeg
            h, w, _, _ = simplejpeg.decode_jpeg_header(jpeg)
            tw, th = target_size(w, h, image_size)
            out = simplejpeg.decode_jpeg(jpeg, colorspace="RGB", min_height=th, min_width=tw)
            assert out.shape[0] * out.shape[1] == predicted[i], (i, image_size, (w, h), out.shape)
