"""tests.plugins.planted's mmap_times: mmap's samples, with (factor - 1) x cpu_ms of CPU burned per sample read
(the planted effects of docs/measurements/main-job.md)."""
from __future__ import annotations

import time

import pytest

from harness.data.generator import DatasetSpec
from harness.data.materialise import materialise
from strategies.storage.mmap import MmapStorage
from tests.plugins.planted import MmapTimesStorage


def test_mmap_times_reads_mmap_samples_and_burns_the_planted_cpu(tmp_path):
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
