"""Pure: what a cell would do on a described target (harness.config.target.Target), from the costs
one run measured (`Costs`) and the accelerator catalogue's step-time model. docs/prediction.md
explains it.

Per rank, with W workers, k the CPU-cost factor at the node's load (below), l and r the loader's
and the rank's CPU seconds per sample, d the device seconds per sample, io a cold read's wait per
sample:

    device bound    1 / (d + p)                      the accelerator, and p: what a step waits for
                                                     beside it (the host-to-device copy, the rank's
                                                     per-step overhead and the ranks' agreement,
                                                     per sample; measured)
    rank host bound 1 / (r k)                        the rank's own host work per step (emulated:
                                                     it and the modelled device time overlap, so
                                                     the step is the longer); r its main thread's
                                                     (rank_main_s), or without what its receiving
                                                     thread does beside it
    loader bound    W / (l k + io)                   each worker is one process (W = 0: the rank
                                                     loads inline, rate
                                                     1 / (l k + io + max(d + p, r k)))
    CPU bound       cores / (ranks per node          the workers and the rank share the node's
                    x (l + r) k)                     cores
    storage bound   bandwidth / (all ranks           cold page cache only
                    x bytes per sample)
    ops bound       IOPS / (all ranks                cold page cache only, with IOPS given
                    x requests per sample)

On a host shared with other busy processes, each of the run's processes gets `share` of a core (1
on a dedicated host; harness.analysis.checkcases' shared-host correction takes it from the measured
outside load): the worker and rank bounds use l k / share and r k / share, and `cores` is what the
run's processes get together.

The rate is the smallest bound, divided by the step imbalance (ranks wait for the slowest each
step). k = 1 + (contention - 1) u, u the share of the node's cores busy at that rate (solved by
iteration), where `contention` is the measured factor a sample's CPU cost rises by when every core
is busy; the measured costs are first brought back to an idle host with the same factor at the load
they were measured under. A cold read costs io = bytes / bandwidth + requests x latency / q per
sample, on top of its CPU, where q = min(in_flight, requests per batch), at least 1: a worker
fetches a batch's requests `in_flight` at a time (Little's law: with no CPU and no transfer, W
workers reach W q / (latency x requests per sample) samples/s). A store's own request capacity (one
server process: 1 / its CPU per request) is the ops bound's IOPS.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from harness.config.accelerators import Accelerator
from harness.config.target import Target

AU_TARGET_PCT = 90.0  # MLPerf Storage's bar: the accelerator busy at least 90% of the time
BOUNDS = ("device", "rank host", "loader workers", "loader CPU", "storage bandwidth", "storage ops/s")


@dataclass(frozen=True)
class Costs:
    """One cell's measured costs, per sample on one rank (CPU seconds), and what they were measured
    under."""

    workload: str
    loader_s: float  # the loader's CPU seconds per sample (its stages)
    rank_s: float  # the rank process's own CPU seconds per sample (its host share of the step, receiving)
    receive_ahead_s: float = 0.0  # of rank_s, what a receiving thread does beside the rank's main thread
    padded_pixels_per_sample: float = 0.0  # pixels workload: what the device's step time scales with
    bytes_per_sample: float = 0.0  # stored bytes read per sample
    requests_per_sample: float = 1.0  # read requests per sample on a cold read
    in_flight: int = 1  # read requests a worker keeps in flight at once (a remote storage's in_flight)
    stages: dict[str, float] = field(default_factory=dict)  # the loader's stages (s/sample), for advice
    step_imbalance: float = 1.0  # mean over steps of the slowest rank's busy time / the mean
    contention: float = 1.0  # CPU cost per sample with every core busy / on an idle host
    busy_share: float = 0.0  # share of the measuring host's cores busy while the costs were measured (0-1)
    cold_read_extra_s: float = 0.0  # extra CPU seconds per sample a cold read costs (the kernel's work)
    rate: str = "amp"  # the catalogue rate the cell's precision selects
    device_s: float | None = None  # measured device seconds per sample (a real GPU): used for the same kind
    # device seconds per sample added to the step (device preprocessing): modelled from the catalogue's
    # assumed decode rate, also where device_s is measured (assumed_decode)
    device_extra_s: float = 0.0
    # on the step's path beside the device (measured in the rank's step parts, not CPU: the contention factor
    # leaves them): the host-to-device copy per sample, and per step the rank's own overhead and the ranks'
    # agreement (its least wait); a step takes the device time plus these
    copy_s: float = 0.0
    serial_step_s: float = 0.0
    # the rank's main thread's CPU seconds per sample (None: not known): with a loader beside it, the step's
    # own host work; the rank's other threads' CPU (rank_s) still counts where the cores bind
    rank_main_s: float | None = None

    def at_idle(self) -> Costs:
        """The costs brought back to an idle host (divided by the contention factor at
        busy_share)."""
        f = _factor(self.contention, self.busy_share)
        return replace(self, loader_s=self.loader_s / f, rank_s=self.rank_s / f,
                       receive_ahead_s=self.receive_ahead_s / f,
                       rank_main_s=self.rank_main_s / f if self.rank_main_s is not None else None,
                       stages={k: v / f for k, v in self.stages.items()}, busy_share=0.0)


@dataclass(frozen=True)
class Prediction:
    samples_per_s: float  # all ranks of all nodes
    per_rank: float
    au_pct: float
    stall_pct: float
    binds: str  # one of BOUNDS
    bounds: dict[str, float]  # samples/s per rank each bound allows (inf: no limit)
    factor: float  # the CPU-cost factor at the predicted load
    workers_for_device: int | None  # workers per rank that make the device bind (None: no number does)
    # where the device binds, what takes the rest of its time (% of the step): the step's path beside the
    # device, and the wait for the slowest rank (the step imbalance); 0 where another bound binds
    path_pct: float = 0.0
    imbalance_pct: float = 0.0


def _factor(contention: float, busy: float) -> float:
    return 1.0 + (max(1.0, contention) - 1.0) * min(1.0, max(0.0, busy))


def device_seconds(costs: Costs, accelerator: Accelerator, batch_size: int) -> float:
    """Device seconds per sample of a full batch on `accelerator` (the catalogue's model, or
    measured)."""
    if costs.device_s is not None:
        return costs.device_s + costs.device_extra_s
    pixels = int(costs.padded_pixels_per_sample * batch_size)
    return accelerator.step_seconds(costs.workload, batch_size, pixels, costs.rate) / batch_size \
        + costs.device_extra_s


def path_seconds(costs: Costs, batch_size: int) -> float:
    """Seconds per sample on the step's path beside the device: the copy, and the per-step overhead
    and agreement over the batch."""
    return costs.copy_s + costs.serial_step_s / max(1, batch_size)


def assumed_decode(costs: Costs) -> bool:
    """A measured (real GPU) device time with a modelled decode added: the catalogue's assumed
    decode rate, not the device's own, so what is shown must say so."""
    return costs.device_s is not None and costs.device_extra_s > 0


def requests_at_once(costs: Costs, target: Target) -> float:
    """Requests a worker has in flight while it waits: its in_flight, no more than a batch holds,
    at least 1."""
    return max(1.0, min(float(costs.in_flight), costs.requests_per_sample * target.batch_size))


def io_seconds(costs: Costs, target: Target) -> float:
    """Wait per sample of a cold read: the bytes at the storage's bandwidth plus its latency per
    request, shared by the requests in flight at once (Little's law)."""
    if target.page_cache != "cold":
        return 0.0
    transfer = costs.bytes_per_sample / (target.storage_read_mb_s * 1e6) if target.storage_read_mb_s else 0.0
    return transfer + costs.requests_per_sample * target.storage_latency_ms / 1e3 / requests_at_once(costs, target)


def rank_seconds(costs: Costs, workers: int, k: float, share: float) -> float:
    """The rank's main thread's host seconds per sample: its own clock's where known (rank_main_s),
    else the rank's CPU less what its receiving thread (one batch ahead with DataLoader workers)
    does beside it."""
    if workers > 0 and costs.rank_main_s is not None:
        return costs.rank_main_s * k / share
    return (costs.rank_s - (costs.receive_ahead_s if workers > 0 else 0.0)) * k / share


def _bounds(costs: Costs, target: Target, d: float, k: float, workers: int,
            share: float = 1.0) -> dict[str, float]:
    """Each bound's samples/s per rank; the device's is a step's device time plus its path beside
    it."""
    cold = target.page_cache == "cold"
    loader = costs.loader_s + (costs.cold_read_extra_s if cold else 0.0)
    io = io_seconds(costs, target)
    host = (loader + costs.rank_s) * k
    rank = rank_seconds(costs, workers, k, share)
    out = {name: math.inf for name in BOUNDS}
    out["device"] = 1.0 / max(d + path_seconds(costs, target.batch_size), 1e-12)
    out["rank host"] = 1.0 / rank if rank > 0 else math.inf
    if workers == 0:
        out["loader workers"] = 1.0 / (loader * k / share + io + max(d + path_seconds(costs, target.batch_size), rank)
                                       or 1e-12)
    elif loader * k + io > 0:
        out["loader workers"] = workers / (loader * k / share + io)
    if host > 0:
        out["loader CPU"] = target.cores_per_node / (target.gpus_per_node * host)
    if cold and target.storage_read_mb_s and costs.bytes_per_sample:
        out["storage bandwidth"] = target.storage_read_mb_s * 1e6 / (target.ranks * costs.bytes_per_sample)
    if cold and target.storage_iops and costs.requests_per_sample:
        out["storage ops/s"] = target.storage_iops / (target.ranks * costs.requests_per_sample)
    return out


def _solve(costs: Costs, target: Target, d: float, workers: int,
           share: float = 1.0) -> tuple[dict[str, float], float]:
    """The bounds at the CPU-cost factor of the load they imply (a fixed point, reached in a few
    rounds)."""
    k = _factor(costs.contention, 1.0)
    for _ in range(20):
        bounds = _bounds(costs, target, d, k, workers, share)
        rate = min(bounds.values())
        busy = rate * target.gpus_per_node * (costs.loader_s + costs.rank_s) * k / target.cores_per_node
        k_next = _factor(costs.contention, busy)
        if abs(k_next - k) < 1e-6:
            break
        k = 0.5 * (k + k_next)
    return bounds, k


def predict(measured: Costs, target: Target, accelerator: Accelerator, advise: bool = True,
            share: float = 1.0) -> Prediction:
    """What the cell whose costs were measured would do on the target (advise: also the workers per
    rank that make the device bind; share: the share of a core each process gets, below 1 on a
    shared host)."""
    costs = measured.at_idle()
    d = device_seconds(costs, accelerator, target.batch_size)
    bounds, k = _solve(costs, target, d, target.workers_per_rank, share)
    binds = min(bounds, key=lambda name: (bounds[name], name != "device"))  # a tie: the device binds
    per_rank = bounds[binds] / (max(1.0, costs.step_imbalance) if target.ranks > 1 else 1.0)
    au = min(100.0, per_rank * d * 100.0)
    step = max(d + path_seconds(costs, target.batch_size), rank_seconds(costs, target.workers_per_rank, k, share))
    path = min(100.0 - au, per_rank * path_seconds(costs, target.batch_size) * 100.0) if binds == "device" else 0.0
    return Prediction(samples_per_s=per_rank * target.ranks, per_rank=per_rank, au_pct=au,
                      stall_pct=max(0.0, 100.0 - per_rank * step * 100.0), binds=binds, bounds=bounds,
                      factor=k, workers_for_device=workers_for_device(costs, target, d) if advise else None,
                      path_pct=path, imbalance_pct=max(0.0, 100.0 - au - path) if binds == "device" else 0.0)


def workers_for_device(costs: Costs, target: Target, d: float, most: int = 64) -> int | None:
    """The fewest workers per rank at which the device binds; None when no number does (the cores,
    the storage or the rank's own host work bind first)."""
    for workers in range(1, most + 1):
        bounds, _ = _solve(costs, target, d, workers)
        if bounds["device"] <= min(bounds.values()) * (1 + 1e-9):
            return workers
        if bounds["loader workers"] > min(bounds.values()):  # more workers no longer help
            return None
    return None


def capacity(measured: Costs, target: Target, accelerator: Accelerator, most: int = 256) -> int:
    """MLPerf Storage's figure: how many accelerators per node the target's node (cores, storage)
    keeps at AU >= 90%, each rank with the workers that serve it best (at most the node's cores).
    0: not even one."""
    best = 0
    for gpus in range(1, most + 1):
        au, fits = -1.0, False
        for workers in range(1, max(1, math.ceil(target.cores_per_node / gpus)) + 1):
            trial = predict(measured, replace(target, gpus_per_node=gpus, workers_per_rank=workers),
                            accelerator, advise=False).au_pct
            if trial >= AU_TARGET_PCT:
                fits = True
                break
            if trial <= au:  # more workers no longer help
                break
            au = trial
        if not fits:
            break
        best = gpus
    return best
