"""tests.plugins.planted's mmap_times: mmap's samples, with (factor - 1) x cpu_ms of CPU burned per sample read
(the planted effects of docs/measurements/main-job.md)."""
from __future__ import annotations

import importlib
import sys
import time

import pytest

from harness.data.generator import DatasetSpec
from harness.data.materialise import materialise
from strategies import registry
from strategies.storage.mmap import MmapStorage


@pytest.fixture
def planted(monkeypatch):
    """The plugin module, imported for this test alone: its storages leave the registry afterwards (other
    tests rely on them being unknown until a plugin is loaded)."""
    registry.load_builtins()
    monkeypatch.setattr(registry, "_REGISTRY", {a: dict(d) for a, d in registry._REGISTRY.items()})
    for module in [m for m in sys.modules if m.startswith("tests.plugins.")]:
        monkeypatch.delitem(sys.modules, module)
    yield importlib.import_module("tests.plugins.planted")
    for module in [m for m in sys.modules if m.startswith("tests.plugins.")]:
        del sys.modules[module]


def test_mmap_times_reads_mmap_samples_and_burns_the_planted_cpu(tmp_path, planted):
    MmapTimesStorage = planted.MmapTimesStorage
    path = materialise(DatasetSpec(samples=20, seed=7, profile="tiny"), "mmap", tmp_path, progress=False)
    planted = MmapTimesStorage(factor=1.5, cpu_ms=2.0).open(path)
    assert planted.burn_s == pytest.approx(0.5 * 2.0 / 1e3)
    before = time.thread_time()
    got = planted.read_batch(list(range(10)))
    assert time.thread_time() - before >= 10 * planted.burn_s  # CPU time, a lower bound: never a speed
    want = MmapStorage().open(path).read_batch(list(range(10)))
    assert [g.index for g in got] == [w.index for w in want] == list(range(10))
    assert MmapTimesStorage(factor=1.0, cpu_ms=2.0).open(path).burn_s == 0.0
    with pytest.raises(ValueError, match="factor must be a finite number >= 1"):
        MmapTimesStorage(factor=0.9)
