"""What-if: the throughput a cell would reach with a given number of loader cores per rank (modelled).

Pure functions over a cell's figures (harness.metrics.feeding): `loader_cpu_s_per_sample` (the loader's CPU
seconds per sample) and `device_samples_per_s` (per rank, the accelerator's rate when never starved,
modelled on an emulated device). With N cores per rank the loader delivers at most N / loader_cpu_s_per_sample
samples/s per rank; the accelerator takes at most device_samples_per_s. The prediction for all ranks is

    world_size * min(device_samples_per_s, N / loader_cpu_s_per_sample)

It assumes the loader's work parallelises over the N cores and ignores everything else that can slow a step
(peer waits, host overhead, memory bandwidth): an upper bound, labelled as modelled wherever it is shown.
"""
from __future__ import annotations

import math

from harness.records import CellResult


def predicted_samples_per_s(world_size: int, device_samples_per_s: float, loader_cpu_s_per_sample: float,
                            cores_per_rank: float) -> float:
    """world_size * min(device rate, cores / loader CPU seconds per sample). A loader that costs no CPU is
    limited by the device alone."""
    if world_size < 1:
        raise ValueError(f"world_size must be at least 1, got {world_size}")
    if not cores_per_rank > 0:
        raise ValueError(f"cores per rank must be positive, got {cores_per_rank}")
    if device_samples_per_s < 0 or loader_cpu_s_per_sample < 0:
        raise ValueError("rates and costs cannot be negative")
    loader_rate = cores_per_rank / loader_cpu_s_per_sample if loader_cpu_s_per_sample > 0 else math.inf
    return world_size * min(device_samples_per_s, loader_rate)


def limited_by(device_samples_per_s: float, loader_cpu_s_per_sample: float, cores_per_rank: float) -> str:
    """"loader" or "device": which of the two bounds the prediction."""
    if loader_cpu_s_per_sample <= 0:
        return "device"
    return "loader" if cores_per_rank / loader_cpu_s_per_sample < device_samples_per_s else "device"


def predict(cell: CellResult, cores_per_rank: float) -> float | None:
    """The prediction for a measured cell; None when it lacks the figures (older lines) or its world size."""
    f = cell.figures
    rate, cost = f.get("device_samples_per_s"), f.get("loader_cpu_s_per_sample")
    world = cell.world_size or f.get("ranks")
    if not cell.measured or rate is None or cost is None or not world:
        return None
    return predicted_samples_per_s(int(world), float(rate), float(cost), cores_per_rank)


def column_header(cores_per_rank: float, modelled_mark: str = "*") -> str:
    return f"predicted samples/s at {cores_per_rank:g} cores/rank{modelled_mark} (modelled)"
