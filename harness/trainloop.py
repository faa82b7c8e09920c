"""One cell on one rank: build the pipeline, run warm-up and the measured window of DDP training steps.

Per step (DESIGN.md section 6): wait = time blocked getting the next batch (including a new epoch's
iterator), h2d = host-to-device copy, compute = forward + backward (with the real DDP allreduce) +
optimizer step, padded to the modelled time on an emulated accelerator. compute also holds `sync`, the
time spent agreeing with the other ranks that every rank can take the step (a tiny allreduce that is
where a fast rank waits for a slow one); busy = step - sync is a rank's own work.
"""
from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader

from harness.matrix import Cell
from harness.memory import MemorySampler
from harness.model import TwoTower
from harness.pipeline import FIELDS_FOR, SampleDataset, collate
from harness.scenario import Scenario

TENSOR_KEYS = ("images", "tokens", "image_emb", "text_emb")


@dataclass
class RankContext:
    rank: int
    world_size: int
    scenario: Scenario
    device: object  # EmulatedDevice | CudaDevice
    data_paths: dict[str, Path]  # storage name -> materialised directory
    progress: Callable[[int, int], None] | None = None


class StepRecorder:
    """Per-step timings of the measured window in preallocated arrays."""

    FIELDS = ("wait", "h2d", "compute", "sync", "padded", "samples", "padded_pixels", "real_pixels", "nbytes")

    def __init__(self, steps: int):
        self.arrays = {name: np.zeros(steps, dtype=np.float64) for name in self.FIELDS}
        self.n = 0

    def add(self, **values: float) -> None:
        for name, value in values.items():
            self.arrays[name][self.n] = value
        self.n += 1

    def as_record(self) -> dict:
        a = {k: v[: self.n] for k, v in self.arrays.items()}
        step = a["wait"] + a["h2d"] + a["compute"]
        rec = {k: np.round(v, 6).tolist() for k, v in a.items() if k in ("wait", "h2d", "compute", "sync", "padded")}
        rec["step"] = np.round(step, 6).tolist()
        for k in ("samples", "padded_pixels", "real_pixels", "nbytes"):
            rec[k] = int(a[k].sum())
        return rec


def param_digest(model: torch.nn.Module) -> str:
    """A hash of every parameter's bytes: equal on all ranks iff DDP kept the replicas identical."""
    h = hashlib.sha1()
    for p in model.parameters():
        h.update(p.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def build_loader(ctx: RankContext, cell: Cell) -> tuple[DataLoader, object, object]:
    sc, tr = ctx.scenario, ctx.scenario.training
    storage = cell.choice("storage").create()
    reader = storage.open(ctx.data_paths[cell.choice("storage").name], fields=FIELDS_FOR[tr.workload])
    reader = cell.choice("cache").create().wrap(reader)
    dataset = SampleDataset(reader, tr.workload, tr.image_size)
    sampler = cell.choice("sampler").create().sampler(
        size=len(dataset), num_replicas=ctx.world_size, rank=ctx.rank, seed=tr.seed)
    batch_sampler = cell.choice("batching").create().batch_sampler(sampler, tr.batch_size)
    workers = tr.workers
    loader = DataLoader(
        dataset, batch_sampler=batch_sampler, num_workers=workers, collate_fn=collate,
        pin_memory=not ctx.device.emulated,
        persistent_workers=tr.persistent_workers and workers > 0,
        prefetch_factor=tr.prefetch_factor if workers > 0 else None,
        multiprocessing_context="forkserver" if workers > 0 else None)
    return loader, sampler, batch_sampler


def _agree(value: int) -> int:
    """The minimum of an integer over all ranks (1 only if every rank can take the step)."""
    t = torch.tensor([value], dtype=torch.int64)
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return int(t.item())


def window_steps(ctx: RankContext, batch_sampler) -> int:
    """Measured steps: --steps, or --epochs worth of this rank's batches, agreed by all ranks."""
    tr = ctx.scenario.training
    return _agree(tr.steps or tr.epochs * len(batch_sampler))


def run_cell(ctx: RankContext, cell: Cell) -> dict:
    """Train one cell on this rank; returns this rank's record (never raises for an OOM)."""
    tr = ctx.scenario.training
    device = ctx.device
    torch.manual_seed(tr.seed)  # same initial weights on every rank (DDP also broadcasts them)
    model = TwoTower(tr.workload).to(device.torch_device)
    ddp = DDP(model)
    device.install(ddp)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=tr.lr, momentum=0.9)
    loader, sampler, batch_sampler = build_loader(ctx, cell)
    window = window_steps(ctx, batch_sampler)
    total_steps = tr.warmup_steps + window
    recorder = StepRecorder(window)
    consumed: list[list[int]] = []
    error = None
    epoch, it = 0, None
    window_start = window_end = None

    with MemorySampler() as memory:
        t_prev = time.perf_counter()
        for step in range(total_steps):
            if step == tr.warmup_steps:
                device.reset_peak()
                t_prev = window_start = time.perf_counter()
            batch = None
            while batch is None:
                if it is None:
                    sampler.set_epoch(epoch)
                    it = iter(loader)
                try:
                    batch = next(it)
                except StopIteration:
                    it, epoch = None, epoch + 1
            t_ready = time.perf_counter()
            tensors = {k: batch[k].to(device.torch_device, non_blocking=True)
                       for k in TENSOR_KEYS if k in batch}
            device.synchronize()
            t_h2d = time.perf_counter()
            samples = len(batch["index"])
            try:
                device.begin_step(samples, batch["padded_pixels"])
                ok = 1
            except torch.OutOfMemoryError as err:
                ok, error = 0, f"OOM: {err}"
            t_sync = time.perf_counter()
            agreed = _agree(ok)
            sync = time.perf_counter() - t_sync
            if not agreed:
                error = error or "OOM on another rank"
                break
            optimizer.zero_grad(set_to_none=True)
            loss = ddp(tensors)
            loss.backward()
            optimizer.step()
            device.synchronize()
            t_end = time.perf_counter()
            if step >= tr.warmup_steps:
                recorder.add(wait=t_ready - t_prev, h2d=t_h2d - t_ready, compute=t_end - t_h2d, sync=sync,
                             padded=device.padded_s,
                             samples=samples, padded_pixels=batch["padded_pixels"],
                             real_pixels=batch["real_pixels"], nbytes=batch["nbytes"])
                consumed.append(batch["index"].tolist())
                window_end = t_end
            t_prev = t_end
            if ctx.progress is not None:
                ctx.progress(step + 1, total_steps)
    del it, loader

    record = recorder.as_record()
    record.update(
        rank=ctx.rank,
        window_s=(window_end - window_start) if window_end and window_start else 0.0,
        steps=recorder.n,
        host_pss_peak=memory.peak_pss, host_rss_peak=memory.peak_rss, memory_samples=memory.samples,
        device_peak_bytes=int(device.peak_bytes), overruns=device.overruns,
        indices=consumed, error=error,
        param_digest=param_digest(model),
    )
    return record
