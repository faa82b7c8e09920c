"""What-if: the throughput a cell would reach with a given number of cores per rank (modelled).

Pure functions over a cell's figures (harness.results.metrics.feeding): `loader_cpu_s_per_sample`
(CPU seconds of the rank's loader processes per sample), `rank_cpu_s_per_sample` (CPU seconds of
the rank process itself: its host share of the step, receiving batches, the agreement, telemetry)
and `device_samples_per_s` (per rank, the accelerator's rate when never starved, modelled on an
emulated device). With N cores per rank and at least N DataLoader workers, the rank and its loader
share the N cores, so per rank

    rate = min(device_samples_per_s, N / (loader_cpu_s_per_sample + rank_cpu_s_per_sample))

and with W < N workers the loader is further bounded by W / loader_cpu_s_per_sample (a worker is
one process, one core). The prediction for all ranks is world_size * rate. It assumes the cores are
independent and fully usable and ignores peer waits and memory bandwidth: an upper bound, labelled
as modelled wherever it is shown. On the 2-core development machine it predicted a 2-worker run
from a 1-worker run within -4% to +24% (docs/emulated-accelerator.md, "What-if").
"""
from __future__ import annotations

import math

from harness.results.cellresult import CellResult


def predicted_samples_per_s(world_size: int, device_samples_per_s: float, loader_cpu_s_per_sample: float,
                            cores_per_rank: float, rank_cpu_s_per_sample: float = 0.0,
                            workers: int | None = None) -> float:
    """world_size * min(device rate, cores / (loader + rank CPU seconds per sample), workers /
    loader CPU seconds per sample). A host that costs no CPU is limited by the device alone."""
    if world_size < 1:
        raise ValueError(f"world_size must be at least 1, got {world_size}")
    if not cores_per_rank > 0:
        raise ValueError(f"cores per rank must be positive, got {cores_per_rank}")
    if device_samples_per_s < 0 or loader_cpu_s_per_sample < 0 or rank_cpu_s_per_sample < 0:
        raise ValueError("rates and costs cannot be negative")
    host = loader_cpu_s_per_sample + rank_cpu_s_per_sample
    rate = min(device_samples_per_s, cores_per_rank / host if host > 0 else math.inf)
    if workers is not None and workers > 0 and loader_cpu_s_per_sample > 0:
        rate = min(rate, workers / loader_cpu_s_per_sample)
    return world_size * rate


def limited_by(device_samples_per_s: float, loader_cpu_s_per_sample: float, cores_per_rank: float,
               rank_cpu_s_per_sample: float = 0.0) -> str:
    """"host" (the loader and the rank's CPU) or "device": which of the two bounds the
    prediction."""
    host = loader_cpu_s_per_sample + rank_cpu_s_per_sample
    if host <= 0:
        return "device"
    return "host" if cores_per_rank / host < device_samples_per_s else "device"


def predict(cell: CellResult, cores_per_rank: float) -> float | None:
    """The prediction for a measured cell; None when it lacks the figures (older lines) or its
    world size."""
    f = cell.figures
    rate, cost = f.device_samples_per_s, f.loader_cpu_s_per_sample
    world = cell.world_size or f.ranks
    if not cell.measured or rate is None or cost is None or not world:
        return None
    return predicted_samples_per_s(int(world), float(rate), float(cost), cores_per_rank,
                                   float(f.rank_cpu_s_per_sample or 0.0))


def column_header(cores_per_rank: float, modelled_mark: str = "*") -> str:
    return f"predicted samples/s at {cores_per_rank:g} cores/rank{modelled_mark} (modelled)"
