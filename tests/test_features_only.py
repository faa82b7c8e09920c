"""A features-only dataset (--scale full: embeddings and captions, empty JPEGs) written and read back by
every storage, hdf5's chunked layout included (its vlen writer took blobs of one length for a 2-D array)."""
from __future__ import annotations

import numpy as np
import pytest

from harness.data.generator import DatasetSpec, generate_sample
from harness.data.materialise import materialise
from strategies import registry

SPEC = DatasetSpec(samples=600, seed=2, profile="tiny", content="features")  # past one 512-sample write batch


@pytest.mark.parametrize("name, params", [("hdf5", {"layout": "chunked"}), ("hdf5", {}), ("mmap", {}),
                                          ("lmdb", {}), ("webdataset", {}), ("parquet", {})])
def test_features_only_round_trip(tmp_path, name, params):
    path = materialise(SPEC, name, tmp_path, progress=False, params=params)
    reader = registry.create("storage", name, **params).open(path)
    got = reader.read_batch([599, 0, 513])
    for s in got:
        want = generate_sample(SPEC, s.index)
        assert s.jpeg == b"" and s.caption == want.caption and np.array_equal(s.image_emb, want.image_emb)
    reader.close()
