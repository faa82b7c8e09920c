"""Microbenchmarks of the read paths: opt-in, real files, warm page cache.

The default ``python -m pytest`` (testpaths = tests) skips everything in this folder. The benchmarks run
when they are asked for, by any of:

* naming this folder (or a file or node id in it): ``python -m pytest tests/benchmarks``;
* a pytest-benchmark option that only makes sense for benchmarks: ``--benchmark-only``,
  ``--benchmark-enable``, ``--benchmark-autosave``, ``--benchmark-save``, ``--benchmark-compare``,
  ``--benchmark-json``;
* ``DLBENCH_BENCH=1`` in the environment.

``python -m pytest tests/benchmarks --benchmark-disable`` is the fast mode: every benchmark body runs once
as a plain test (its assertions included), nothing is timed.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from harness.data.generator import DatasetSpec, generate_sample, iter_samples
from harness.data.materialise import materialise
from strategies import registry
from strategies.sample import FIELDS

HERE = Path(__file__).resolve().parent

# Small enough to materialise in a few seconds (~1.6 ms per sample per storage), big enough that a batch of
# 128 random indices is a real random-access read.
SPEC = DatasetSpec(samples=512, seed=0, profile="cc3m", image_scale=0.5)
INDEX_SEED = 20240601
# Storage variants the benchmarks name (label -> registry name, parameters), beside the plain names.
VARIANTS = {"hdf5-chunked": ("hdf5", {"layout": "chunked"}),
            "hdf5-chunked-gzip": ("hdf5", {"layout": "chunked", "compression": "gzip"})}

_REQUEST_OPTIONS = ("benchmark_only", "benchmark_enable", "benchmark_autosave", "benchmark_save",
                    "benchmark_compare", "benchmark_json")


def _named_here(config: pytest.Config) -> bool:
    """True when a command-line path (or node id) lies in this folder."""
    base = Path(config.invocation_params.dir)
    for arg in config.args:
        path = (base / arg.split("::", 1)[0]).resolve()
        if path == HERE or HERE in path.parents:
            return True
    return False


def benchmarks_requested(config: pytest.Config) -> bool:
    if os.environ.get("DLBENCH_BENCH", "") not in ("", "0"):
        return True
    if any(config.getoption(name, default=None) for name in _REQUEST_OPTIONS):
        return True
    return _named_here(config)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # A conftest's collection hook sees every item of the session: touch only the ones in this folder.
    if benchmarks_requested(config):
        return
    skip = pytest.mark.skip(reason="read-path benchmarks are opt-in: python -m pytest tests/benchmarks "
                                   "--benchmark-only (see tests/benchmarks/README.md)")
    for item in items:
        if HERE in Path(item.path).resolve().parents:
            item.add_marker(skip)


class Materialised:
    """The benchmark dataset in each storage format, materialised on first use and kept for the module."""

    def __init__(self, root: Path):
        self.root = root
        self._paths: dict[str, Path] = {}
        self._readers: dict[tuple, object] = {}
        self._expected: dict[int, object] = {}

    def path(self, storage: str) -> Path:
        if storage not in self._paths:
            if storage in VARIANTS:  # written straight through the storage, under its own directory
                name, params = VARIANTS[storage]
                made = registry.create("storage", name, **params)
                path = self.root / f"{SPEC.key()}-{name}{made.variant}"
                made.write(iter_samples(SPEC), path, SPEC.samples)
                self._paths[storage] = path
            else:
                self._paths[storage] = materialise(SPEC, storage, self.root, progress=False)
        return self._paths[storage]

    @staticmethod
    def indices(batch_size: int) -> list[int]:
        """A fixed random batch: the first ``batch_size`` of one seeded permutation (smaller ones are prefixes)."""
        perm = np.random.default_rng(INDEX_SEED).permutation(SPEC.samples)
        return [int(i) for i in perm[:batch_size]]

    def open(self, storage: str, fields=FIELDS):
        """A reader (one per storage and fields, shared by the module's tests) whose files are in the page
        cache: every sample has been read once through it."""
        key = (storage, tuple(fields))
        if key not in self._readers:
            name, params = VARIANTS.get(storage, (storage, {}))
            reader = registry.create("storage", name, **params).open(self.path(storage), fields=key[1])
            warm = reader.read_batch(range(SPEC.samples))
            assert [s.index for s in warm] == list(range(SPEC.samples))
            self._readers[key] = reader
        return self._readers[key]

    def expected(self, index: int):
        """The generator's sample ``index`` (what every storage must read back)."""
        if index not in self._expected:
            self._expected[index] = generate_sample(SPEC, index)
        return self._expected[index]

    def close(self) -> None:
        for reader in self._readers.values():
            reader.close()
        self._readers.clear()


@pytest.fixture(scope="module")
def bench_data(tmp_path_factory) -> Materialised:
    data = Materialised(tmp_path_factory.mktemp("bench-data"))
    yield data
    data.close()
