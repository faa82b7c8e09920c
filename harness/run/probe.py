"""The reference probe: how fast is this machine at the data path, independent of the strategies?

Measured once per repeat so cells can be reported relative to the machine they ran on:
- ideal_samples_per_s: an in-memory ideal loader: the scenario's own samples, already in memory, prepared
  (JPEG decode and resize, or embeddings) and collated in one process: no storage, no workers, no IPC.
- memcpy_gb_s: memory-copy bandwidth of a 64 MB numpy array (best of a few copies).
"""
from __future__ import annotations

import functools
import time

import numpy as np

from harness.config.scenario import Scenario
from harness.data.generator import head
from harness.results.probeline import ProbeLine
from harness.train.torchdataset import SampleDataset, collate


class _InMemoryReader:
    def __init__(self, samples):
        self.samples = samples

    def __len__(self) -> int:
        return len(self.samples)

    def read_batch(self, indices):
        return [self.samples[i] for i in indices]


@functools.lru_cache(maxsize=4)
def _pool(spec, size: int) -> list:
    """The probe's samples, generated once per process (the other ranks wait while rank 0 probes)."""
    return head(spec, size)


def ideal_samples_per_s(scenario: Scenario, seconds: float = 0.4, pool: int = 64) -> float:
    tr = scenario.training
    samples = _pool(scenario.dataset, pool)
    dataset = SampleDataset(_InMemoryReader(samples), tr.workload, tr.image_size, decoder=tr.decoder)
    batch = [i % len(samples) for i in range(tr.batch_size)]
    collate(dataset.__getitems__(batch))  # warm-up
    done, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        collate(dataset.__getitems__(batch))
        done += len(batch)
    return done / (time.perf_counter() - start)


def memcpy_gb_s(nbytes: int = 64 << 20, rounds: int = 5) -> float:
    src = np.ones(nbytes, dtype=np.uint8)
    dst = np.empty_like(src)
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - start)
    return nbytes / best / 1e9


def measure(scenario: Scenario, repeat: int) -> ProbeLine:
    return ProbeLine(repeat, ideal_samples_per_s(scenario), memcpy_gb_s())
