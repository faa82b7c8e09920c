"""Fidelity self-test (`run_bench.py --self-test`, command.py beside it prints it): the real
training loop on a calibrated synthetic workload with known answers.

The loader's workers each take a known time per batch (a sleep) and the emulated accelerator's step
takes a known time, so throughput, data stall and AU have analytic values. With W workers each
needing L seconds per batch, a batch is ready every L/W seconds. Handing a ready batch from a
worker to the training process also costs r (shared-memory tensors, unpickling: about 2 ms on a
small VM); the self-test measures r first on the same loader without the sleep, and reports it.
With compute C per step, a step takes T = max(C + r, L/W), and

    throughput = B / T      stall % = (T - C) / T      AU % = C / T

Two regimes: overlapped (C > L/W: no stall) and starved (L/W > C). The harness's own loop,
DataLoader, emulated device, DDP (one gloo rank) and metrics produce the measured figures; the
self-test reports the error of each (throughput relative, stall and AU in percentage points)
against a tolerance.

A third regime, straggler, runs two spawned ranks of the pixels workload (real uint8 images and
tokens through the pixels collate) whose loaders differ: rank 0 needs L0 per batch, rank 1 (the
straggler) L1 > L0, each with W workers. The ranks step together, so a step takes T = max(C + r,
L1/W); rank 1 waits for its data (T - C), rank 0 gets its batch at once (r) and then waits for rank
1 in the per-step agreement (T - C - r). With B samples per rank per step:

    throughput = 2B / T          stall % = (r + T - C) / 2T
    peer wait % = (T - C - r) / 2T   AU % = C / T

It builds the scenario (config), the emulated device (device), the loop and its pipeline (train),
the figures (results) and spawns the straggler's ranks on a free port (harness.run.launch).
"""
from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import dataclass, replace

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.utils.data import BatchSampler, DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

from harness.config.accelerators import get_accelerator
from harness.config.matrix import Cell
from harness.config.scenario import Scenario, StrategyChoice, Training
from harness.data.generator import DatasetSpec
from harness.device.devices import EmulatedDevice
from harness.measure.hostload import HostLoad
from harness.results import metrics
from harness.run.launch import free_port
from harness.train.pipeline import Pipeline
from harness.train.torchdataset import collate
from harness.train.trainloop import RankContext, run_cell
from strategies import registry

# % for throughput, percentage points for stall, peer wait and AU. On a host with 2 cores or fewer the ranks,
# their workers and the hand-off share the cores, and the overlapped regime drifts by up to ~3.3% between
# runs there: 5 on such a host (stated in the output), 3 elsewhere.
TOLERANCE = 3.0 if (os.cpu_count() or 1) > 2 else 5.0


@dataclass(frozen=True)
class Regime:
    name: str
    latency_s: float  # per batch, per worker
    workers: int
    compute_s: float  # per step, emulated

    def expected(self, batch_size: int, handoff_s: float) -> dict:
        step = max(self.compute_s + handoff_s, self.latency_s / self.workers)
        return {"throughput": batch_size / step, "stall_mean_pct": (step - self.compute_s) / step * 100,
                "au_pct": self.compute_s / step * 100}


# Steps of 100 ms keep the loop's own fixed costs (the rank agreement, the optimizer's bookkeeping: well under
# a millisecond) and the hand-off's jitter small against the 3% tolerance on a busy 2-core machine.
REGIMES = (Regime("overlapped", latency_s=0.100, workers=2, compute_s=0.100),
           Regime("starved", latency_s=0.400, workers=2, compute_s=0.100))


IMAGE_SIDE = 32  # the straggler regime's images: IMAGE_SIDE x IMAGE_SIDE x 3, uint8


class SleepDataset(Dataset):
    """Items that take a known time to load per batch: features (embeddings) or pixels (image +
    tokens)."""

    def __init__(self, size: int, latency_s: float, workload: str = "features"):
        self.size, self.latency_s, self.workload = size, latency_s, workload

    def __len__(self) -> int:
        return self.size

    def _item(self, i: int) -> dict:
        if self.workload == "pixels":
            return {"index": i, "nbytes": 0, "tokens": [1, 2, 3],
                    "image": torch.full((IMAGE_SIDE, IMAGE_SIDE, 3), i % 255, dtype=torch.uint8)}
        return {"index": i, "nbytes": 0, "image_emb": torch.zeros(2048), "text_emb": torch.zeros(768)}

    def __getitems__(self, indices):
        time.sleep(self.latency_s)
        return [self._item(i) for i in indices]


def _loader(samples: int, batch_size: int, latency_s: float, workers: int, workload: str = "features",
            rank: int = 0, world: int = 1):
    sampler = DistributedSampler(range(samples), num_replicas=world, rank=rank, shuffle=False)
    batch_sampler = BatchSampler(sampler, batch_size, drop_last=False)
    loader = DataLoader(SleepDataset(samples, latency_s, workload), batch_sampler=batch_sampler,
                        num_workers=workers,
                        collate_fn=collate, persistent_workers=True, prefetch_factor=2,
                        multiprocessing_context="forkserver")
    return loader, sampler, batch_sampler


def measure_handoff(batch_size: int, workers: int, batches: int = 15) -> float:
    """Median time of next() on a loader whose queue is already full: the worker-to-trainer
    hand-off."""
    loader, _, _ = _loader(batch_size * (batches + 10), batch_size, 0.0, workers)
    it, times = iter(loader), []
    next(it)
    for _ in range(batches):
        time.sleep(0.02)  # let the workers refill the queue
        start = time.perf_counter()
        next(it)
        times.append(time.perf_counter() - start)
    del it, loader
    return sorted(times)[len(times) // 2]


def _pipeline_for(latency_s: float, workers: int, workload: str = "features"):
    def build(ctx: RankContext, cell: Cell) -> Pipeline:
        tr = ctx.scenario.training
        loader, sampler, batch_sampler = _loader(ctx.scenario.dataset.samples, tr.batch_size, latency_s,
                                                 workers, workload, ctx.rank, ctx.world_size)
        return Pipeline(loader, sampler, batch_sampler, registry.create("batching", "fixed"), None)
    return build


def _calibrated(compute_s: float):
    """An accelerator whose every step takes compute_s (plus, for pixels, a known per-pixel
    term)."""
    return replace(get_accelerator("V100-16GB"), name="calibrated", step_overhead_s=compute_s,
                   features_flops_per_sample=0.0)


def _scenario(accelerator, workload: str, batch_size: int, workers: int, warmup: int, steps: int,
              world: int) -> Scenario:
    training = Training(workload=workload, batch_size=batch_size, image_size=IMAGE_SIDE, warmup_steps=warmup,
                        steps=steps, epochs=0, workers=workers, prefetch_factor=2, persistent_workers=True,
                        lr=0.01, seed=0)
    samples = world * batch_size * (warmup + steps + 8)  # one epoch covers the whole run: no epoch boundary
    return Scenario(name="self-test", description="", path=None, accelerator=accelerator, world_size=world,
                    dataset=DatasetSpec(samples=samples, profile="tiny"), training=training)


SYNTHETIC_CELL = Cell(tuple(StrategyChoice(a, n) for a, n in (("storage", "synthetic"), ("cache", "none"),
                                                               ("batching", "fixed"), ("sampler", "default"))))


def _rows(name: str, figures: dict, expected: dict, handoff_s: float, tolerance: float = TOLERANCE,
          outside_pct: float | None = None) -> list:
    """One row per figure; `outside_pct`: the CPU other processes used while the regime ran
    (HostLoad)."""
    rows = []
    for key, value in expected.items():
        measured = figures[key]
        error = (measured / value - 1) * 100 if key == "throughput" else measured - value
        rows.append({"regime": name, "figure": key, "expected": value, "measured": measured, "error": error,
                     "ok": abs(error) <= tolerance, "handoff_ms": handoff_s * 1e3, "outside_pct": outside_pct})
    return rows


def run_regime(regime: Regime, steps: int, handoff_s: float, batch_size: int = 4, warmup: int = 6) -> dict:
    """One regime through run_cell in this process (a one-rank gloo group must already exist).

    The W workers start together and stay in phase, so batches arrive in groups of W: warm-up and
    window are whole multiples of W steps, so the window holds whole arrival cycles."""
    steps, warmup = -(-steps // regime.workers) * regime.workers, -(-warmup // regime.workers) * regime.workers
    accelerator = _calibrated(regime.compute_s)
    scenario = _scenario(accelerator, "features", batch_size, regime.workers, warmup, steps, world=1)
    ctx = RankContext.alone(0, 1, scenario, EmulatedDevice(accelerator, "features"),
                            build_pipeline=_pipeline_for(regime.latency_s, regime.workers))
    load = HostLoad(os.getpid())  # this process and its workers are the run; the rest is outside load
    load.start()
    figures = metrics.cell_figures([run_cell(ctx, SYNTHETIC_CELL)])
    return {"regime": regime.name, "rows": _rows(regime.name, figures, regime.expected(batch_size, handoff_s),
                                                 handoff_s, outside_pct=load.stop()[0])}


@dataclass(frozen=True)
class Straggler:
    """Two ranks of the pixels workload; rank 1's loader is slower by a known amount."""

    name: str = "straggler"
    latency_s: tuple[float, float] = (0.100, 0.300)  # per batch, per worker, of rank 0 and rank 1
    workers: int = 2
    compute_s: float = 0.100  # per step, emulated (before the known per-pixel term)
    batch_size: int = 4

    def step_compute_s(self) -> float:
        return _calibrated(self.compute_s).step_seconds("pixels", self.batch_size,
                                                        self.batch_size * IMAGE_SIDE * IMAGE_SIDE)

    def expected(self, handoff_s: float) -> dict:
        c = self.step_compute_s()
        t = max(c + handoff_s, max(self.latency_s) / self.workers)
        return {"throughput": 2 * self.batch_size / t, "stall_mean_pct": (handoff_s + t - c) / (2 * t) * 100,
                "peer_wait_pct": (t - c - handoff_s) / (2 * t) * 100, "au_pct": c / t * 100}


def _straggler_rank(rank: int, regime: Straggler, steps: int, warmup: int, port: int, out: str) -> None:
    """One spawned rank of the straggler regime; rank 0 writes the cell's figures to `out`
    (JSON)."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        accelerator = _calibrated(regime.compute_s)
        scenario = _scenario(accelerator, "pixels", regime.batch_size, regime.workers, warmup, steps, world=2)
        ctx = RankContext.alone(rank, 2, scenario, EmulatedDevice(accelerator, "pixels"),
                                build_pipeline=_pipeline_for(regime.latency_s[rank], regime.workers, "pixels"))
        record = run_cell(ctx, SYNTHETIC_CELL)
        gathered = [None, None] if rank == 0 else None
        dist.gather_object(record, gathered, dst=0)
        if rank == 0:
            with open(out, "w") as f:
                json.dump(metrics.cell_figures(gathered), f)
    finally:
        dist.destroy_process_group()


def run_straggler(steps: int, handoff_s: float, regime: Straggler = Straggler(), warmup: int = 6) -> list:
    """The straggler regime in two spawned rank processes; returns its rows."""
    steps, warmup = -(-steps // regime.workers) * regime.workers, -(-warmup // regime.workers) * regime.workers
    load = HostLoad(os.getpid())  # this process and its spawned ranks (and their workers) are the run
    load.start()
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "figures.json")
        mp.start_processes(_straggler_rank, args=(regime, steps, warmup, free_port(), out), nprocs=2,
                           start_method="spawn", join=True)
        with open(out) as f:
            figures = json.load(f)
    return _rows(regime.name, figures, regime.expected(handoff_s), handoff_s, outside_pct=load.stop()[0])


def run(steps: int = 40) -> list[dict]:
    """The one-rank regimes in a gloo process group of this process, then the two-rank straggler
    regime in spawned processes; returns all rows."""
    torch.set_num_threads(1)
    own_group = not dist.is_initialized()
    if own_group:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    try:
        handoff = measure_handoff(batch_size=4, workers=2)
        rows = [row for regime in REGIMES for row in run_regime(regime, steps, handoff)["rows"]]
    finally:
        if own_group:
            dist.destroy_process_group()
    return rows + run_straggler(steps, handoff)
