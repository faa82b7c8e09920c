"""The reference probe: how fast is this machine at the data path, independent of the strategies?

Measured once per repeat so cells can be reported relative to the machine they ran on:
- ideal_samples_per_s: an in-memory ideal loader: the scenario's own samples, already in memory,
  prepared (JPEG decode and resize, or embeddings) and collated in one process: no storage, no
  workers, no IPC.
- ideal_cpu_samples_per_s: the same loop's samples per CPU second of the probing thread
  (time.thread_time): what the machine check compares (harness.gates.baseline.check_machine). The
  wall-clock figure moves with the host's load (the time other processes take from the probe's
  core), the CPU figure mostly does not: on the 2-core development machine beside one core of
  outside load, 133 to 1,989 samples/s against 1,921 to 2,584 per CPU second in the same six probes
  (measured; docs/measurements/ci-gate.md has the 20-run spreads).
- memcpy_gb_s: memory-copy bandwidth of a 64 MB numpy array (best of a few copies, each timed by
  the thread's CPU clock, as the CPU figure above and for the same reason).
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
    """The probe's samples, generated once per process (the other ranks wait while rank 0
    probes)."""
    return head(spec, size)


def ideal_rates(scenario: Scenario, seconds: float = 0.4, pool: int = 64) -> tuple[float, float]:
    """The in-memory ideal loader's samples per wall second and per CPU second of this thread, one
    loop."""
    tr = scenario.training
    samples = _pool(scenario.dataset, pool)
    dataset = SampleDataset(_InMemoryReader(samples), tr.workload, tr.image_size, decoder=tr.decoder)
    batch = [i % len(samples) for i in range(tr.batch_size)]
    collate(dataset.__getitems__(batch))  # warm-up
    done, start, cpu_start = 0, time.perf_counter(), time.thread_time()
    while time.perf_counter() - start < seconds:
        collate(dataset.__getitems__(batch))
        done += len(batch)
    wall, cpu = time.perf_counter() - start, time.thread_time() - cpu_start
    return done / wall, done / max(cpu, 1e-9)


def memcpy_gb_s(nbytes: int = 64 << 20, rounds: int = 5) -> float:
    """The best of `rounds` copies, each timed by this thread's CPU clock: a copy the scheduler
    interrupts is not counted slower for it (on the loaded 2-core machine the wall clock halved the
    figure in whole runs)."""
    src = np.ones(nbytes, dtype=np.uint8)
    dst = np.empty_like(src)
    best = float("inf")
    for _ in range(rounds):
        start = time.thread_time()
        np.copyto(dst, src)
        best = min(best, time.thread_time() - start)
    return nbytes / max(best, 1e-9) / 1e9


def measure(scenario: Scenario, repeat: int) -> ProbeLine:
    wall, cpu = ideal_rates(scenario)
    return ProbeLine(repeat, wall, memcpy_gb_s(), cpu)
