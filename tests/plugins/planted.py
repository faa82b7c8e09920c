"""Storages planted to measure what the harness can find (loaded with --plugin tests.plugins.planted):

- `mmap_copy`: the mmap storage under another name, byte for byte the same reads: any effect the harness
  reports for it against `mmap` is a false alarm;
- `mmap_slow`: the mmap storage plus `burn_ms` of CPU burned in the reader per sample read (in the DataLoader
  worker, so it is loader CPU): a planted slowdown of known size;
- `mmap_times`: the mmap storage with its CPU per sample (loader + rank) multiplied by `factor`: it burns
  (factor - 1) x `cpu_ms` per sample read, `cpu_ms` being mmap's measured CPU ms per sample in the same
  scenario (docs/measurements/main-job.md gives the calibration), so the planted effect on the host rate is
  x1/factor.
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from strategies.params import number
from strategies.registry import register
from strategies.sample import FIELDS
from strategies.storage.mmap import MmapReader, MmapStorage


@register("storage", "mmap_copy")
class MmapCopyStorage(MmapStorage):
    name = "mmap_copy"


class SlowReader(MmapReader):
    def __init__(self, path: Path, fields: Sequence[str], burn_ms: float):
        super().__init__(path, fields)
        self.burn_s = burn_ms / 1e3

    def read_batch(self, indices):
        samples = super().read_batch(indices)
        end = time.thread_time() + self.burn_s * len(indices)
        while time.thread_time() < end:  # CPU, not a sleep: the loader's CPU per sample grows by burn_ms
            pass
        return samples


@register("storage", "mmap_slow")
class MmapSlowStorage(MmapStorage):
    name = "mmap_slow"

    def __init__(self, burn_ms: float = 0.5):
        self.burn_ms = number("burn_ms", burn_ms, 0.0)

    def open(self, path: Path, fields: Sequence[str] = FIELDS) -> SlowReader:
        return SlowReader(path, fields, self.burn_ms)


@register("storage", "mmap_times")
class MmapTimesStorage(MmapStorage):
    name = "mmap_times"

    def __init__(self, factor: float = 1.0, cpu_ms: float = 1.2):
        self.factor = number("factor", factor, 1.0)
        self.cpu_ms = number("cpu_ms", cpu_ms, 0.0)

    def open(self, path: Path, fields: Sequence[str] = FIELDS) -> SlowReader:
        return SlowReader(path, fields, (self.factor - 1.0) * self.cpu_ms)
