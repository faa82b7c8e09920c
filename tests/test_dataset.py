"""The CC3M-like generator: deterministic, photo-like JPEGs, CC3M-like spread of sizes and captions."""
from __future__ import annotations

import dataclasses
import io

import numpy as np
import pytest
from PIL import Image

from harness.data.generator import (
    PROFILES,
    DatasetSpec,
    generate_sample,
    image_sides,
    iter_samples,
)
from strategies.sample import IMAGE_EMB_DIM, TEXT_EMB_DIM


def test_same_spec_and_index_give_identical_samples():
    spec = DatasetSpec(samples=20, seed=3, image_scale=0.25)
    for i in (0, 7, 19):
        a, b = generate_sample(spec, i), generate_sample(spec, i)
        assert a.same_as(b)
        assert a.jpeg == b.jpeg


def test_different_seed_gives_different_samples():
    a = generate_sample(DatasetSpec(samples=5, seed=0, image_scale=0.25), 2)
    b = generate_sample(DatasetSpec(samples=5, seed=1, image_scale=0.25), 2)
    assert a.jpeg != b.jpeg
    assert not np.array_equal(a.image_emb, b.image_emb)


def test_iter_samples_matches_generate_sample():
    spec = DatasetSpec(samples=10, profile="tiny")
    got = list(iter_samples(spec, start=3, stop=7))
    assert [s.index for s in got] == [3, 4, 5, 6]
    assert all(s.same_as(generate_sample(spec, s.index)) for s in got)
    assert len(list(iter_samples(spec))) == 10


def test_sample_fields_have_the_declared_shapes():
    s = generate_sample(DatasetSpec(samples=1, profile="tiny"), 0)
    assert s.image_emb.dtype == np.float32 and s.image_emb.shape == (IMAGE_EMB_DIM,)
    assert s.text_emb.dtype == np.float32 and s.text_emb.shape == (TEXT_EMB_DIM,)
    assert np.isclose(np.linalg.norm(s.image_emb), 1.0, atol=1e-5)
    assert isinstance(s.caption, str) and s.caption


@pytest.mark.parametrize("spec", [DatasetSpec(samples=40, seed=5, image_scale=0.3),
                                  DatasetSpec(samples=40, profile="tiny")])
def test_jpegs_decode_to_the_sizes_image_sides_reports(spec):
    sides = image_sides(spec)
    assert sides.dtype == np.int32 and sides.shape == (spec.samples, 2)
    for s in iter_samples(spec):
        img = Image.open(io.BytesIO(s.jpeg))
        assert img.format == "JPEG"
        img.load()
        w, h = img.size
        assert (h, w) == tuple(sides[s.index])
        assert min(h, w) >= 16


def test_cc3m_sizes_vary_widely():
    sides = image_sides(DatasetSpec(samples=200)).astype(np.int64)
    area = sides[:, 0] * sides[:, 1]
    assert area.max() / area.min() > 10
    aspect = sides[:, 1] / sides[:, 0]
    assert (aspect < 1).any() and (aspect > 1.5).any()  # portraits and wide landscapes
    assert 350 < np.median(sides.max(axis=1)) < 700
    assert sides.max() <= 1600


def test_image_scale_scales_sides():
    full = image_sides(DatasetSpec(samples=50, seed=2)).astype(float)
    half = image_sides(DatasetSpec(samples=50, seed=2, image_scale=0.5)).astype(float)
    assert np.all(np.abs(half - np.maximum(16, full * 0.5)) <= 1)


def test_tiny_profile_is_small():
    sides = image_sides(DatasetSpec(samples=100, profile="tiny"))
    assert 40 < np.median(sides.max(axis=1)) < 100


def test_jpegs_compress_like_photos():
    spec = DatasetSpec(samples=30, seed=1, image_scale=0.5)
    sides = image_sides(spec).astype(np.int64)
    ratios = [len(s.jpeg) / (sides[s.index, 0] * sides[s.index, 1] * 3) for s in iter_samples(spec)]
    assert np.mean(ratios) < 0.5


def test_caption_lengths_are_cc3m_like():
    spec = DatasetSpec(samples=500, seed=4, image_scale=0.0625)  # captions don't depend on scale
    words = np.array([len(s.caption.split()) for s in iter_samples(spec)])
    assert 7 <= words.mean() <= 14
    assert words.min() >= 3 and words.max() <= 40
    assert words.std() > 2


def test_key_is_stable_and_sensitive_to_every_field():
    base = DatasetSpec(samples=100, seed=1, profile="cc3m", image_scale=1.0)
    assert base.key() == DatasetSpec(samples=100, seed=1, profile="cc3m", image_scale=1.0).key()
    assert len(base.key()) == 12 and int(base.key(), 16) >= 0
    variants = [
        dataclasses.replace(base, samples=101),
        dataclasses.replace(base, seed=2),
        dataclasses.replace(base, profile="tiny"),
        dataclasses.replace(base, image_scale=0.5),
    ]
    keys = {base.key()} | {v.key() for v in variants}
    assert len(keys) == 5
    assert base.to_dict() == {"samples": 100, "seed": 1, "profile": "cc3m", "image_scale": 1.0}


def test_bad_specs_are_rejected():
    with pytest.raises(ValueError):
        DatasetSpec(samples=1, profile="nope")
    with pytest.raises(IndexError):
        generate_sample(DatasetSpec(samples=3), 3)
    assert set(PROFILES) >= {"cc3m", "tiny"}


def test_features_content_has_no_jpeg_and_a_key_of_its_own():
    import hashlib
    import json

    from harness.data.generator import GENERATOR_VERSION

    plain = DatasetSpec(samples=10, seed=1)
    doc = {"samples": 10, "seed": 1, "profile": "cc3m", "image_scale": 1.0, "generator_version": GENERATOR_VERSION}
    old_key = hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:12]
    assert plain.key() == old_key  # existing datasets keep their directories
    features = DatasetSpec(samples=10, seed=1, content="features")
    assert features.key() != plain.key()
    s, full = generate_sample(features, 3), generate_sample(plain, 3)
    assert s.jpeg == b"" and s.caption and s.image_emb.shape == full.image_emb.shape
    with pytest.raises(ValueError, match="content"):
        DatasetSpec(samples=1, content="pixels")


def test_parallel_generation_yields_the_same_samples_in_order(monkeypatch):
    from harness.data import generator

    monkeypatch.setattr(generator, "PARALLEL_MIN_SAMPLES", 1)
    monkeypatch.setattr(generator, "CHUNK", 16)
    spec = DatasetSpec(samples=70, seed=2, profile="tiny")
    got = list(generator.iter_samples_parallel(spec, processes=2))
    assert [s.index for s in got] == list(range(70))
    assert all(a.same_as(b) for a, b in zip(got, iter_samples(spec)))
