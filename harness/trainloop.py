"""One cell on one rank: build the pipeline, run warm-up and the measured window of DDP training steps.

Per step (DESIGN.md section 6): wait = time blocked getting the next batch (including a new epoch's
iterator), h2d = host-to-device copy, compute = forward + backward (with the real DDP allreduce) +
optimizer step, padded to the modelled time on an emulated accelerator. compute also holds `sync`, the
time spent agreeing with the other ranks on the step (a tiny allreduce that is where a fast rank waits
for a slow one); busy = step - sync is a rank's own work.

Ranks never hang: before every step they agree (one allreduce) whether any rank still has a batch and
whether any rank failed. A rank whose epoch is over while others still have batches takes a shadow step
(a zero-weight step that joins the gradient allreduce), so every rank takes the same number of steps.
"""
from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from harness import loader as pipeline_builder
from harness.matrix import Cell
from harness.memory import MemorySampler
from harness.model import TwoTower
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
    """Per-step figures of the measured window in preallocated arrays."""

    TIMES = ("wait", "h2d", "compute", "sync", "padded")
    COUNTS = ("samples", "padded_pixels", "real_pixels", "nbytes")

    def __init__(self, steps: int):
        self.arrays = {name: np.zeros(steps, dtype=np.float64) for name in self.TIMES + self.COUNTS}
        self.n = 0

    def add(self, **values: float) -> None:
        for name, value in values.items():
            self.arrays[name][self.n] = value
        self.n += 1

    def as_record(self) -> dict:
        a = {k: v[: self.n] for k, v in self.arrays.items()}
        rec = {k: np.round(a[k], 6).tolist() for k in self.TIMES}
        rec["step"] = np.round(a["wait"] + a["h2d"] + a["compute"], 6).tolist()
        rec["batch_sizes"] = a["samples"].astype(int).tolist()
        for k in self.COUNTS:
            rec[k] = int(a[k].sum())
        return rec


@dataclass
class CacheTally:
    """Latest cache statistics per reading process; totals at the window's start are subtracted."""

    latest: dict[str, dict] = field(default_factory=dict)
    at_window_start: dict[str, float] = field(default_factory=dict)

    def update(self, stats: dict | None) -> None:
        if stats:
            self.latest[stats["key"]] = stats

    def totals(self) -> dict[str, float]:
        keys = ("hits", "misses", "evictions", "resident_bytes")
        return {k: float(sum(s.get(k, 0) for s in self.latest.values())) for k in keys}

    def mark_window(self) -> None:
        self.at_window_start = self.totals()

    def record(self) -> dict | None:
        if not self.latest:
            return None
        end = self.totals()
        window = {k: end[k] - self.at_window_start.get(k, 0.0) for k in ("hits", "misses", "evictions")}
        scope = next(iter(self.latest.values())).get("scope")
        return {**window, "resident_bytes": end["resident_bytes"], "processes": len(self.latest),
                "scope": scope}


def param_digest(model: torch.nn.Module) -> str:
    """A hash of every parameter's bytes: equal on all ranks iff DDP kept the replicas identical."""
    h = hashlib.sha1()
    for p in model.parameters():
        h.update(p.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def agree(*values: int) -> list[int]:
    """The maximum of each integer over all ranks (one allreduce)."""
    t = torch.tensor(values, dtype=torch.int64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.tolist()


def window_steps(ctx: RankContext, batch_sampler) -> int:
    """Measured steps: --steps, or --epochs worth of the longest rank's batches, agreed by all ranks."""
    tr = ctx.scenario.training
    return agree(tr.steps or tr.epochs * len(batch_sampler))[0]


class BatchSource:
    """This rank's batches across epochs; None once its epoch is over, until every rank's is."""

    def __init__(self, pipe: pipeline_builder.Pipeline):
        self.pipe = pipe
        self.epoch = 0
        self.completed_epochs = 0
        self._it = None
        self._exhausted = False
        self.consumed: dict[int, list[int]] = {}

    def next(self) -> dict | None:
        if self._exhausted:
            return None
        if self._it is None:
            self.pipe.sampler.set_epoch(self.epoch)
            self._it = iter(self.pipe.loader)
        try:
            batch = next(self._it)
        except StopIteration:
            self._exhausted = True
            return None
        self.consumed.setdefault(self.epoch, []).extend(batch["index"].tolist())
        return batch

    def new_epoch(self) -> None:
        self._it, self._exhausted = None, False
        self.epoch += 1
        self.completed_epochs += 1


def _to_device(batch: dict, device) -> dict:
    tensors = {k: batch[k].to(device.torch_device, non_blocking=True) for k in TENSOR_KEYS if k in batch}
    device.synchronize()
    return tensors


def _micro_batches(tensors: dict, samples: int, fits: Callable[[int], bool]) -> list[dict] | None:
    """Split a batch into the fewest equal power-of-two parts that fit; None if one sample does not."""
    parts = 1
    while not fits((samples + parts - 1) // parts):
        if parts >= samples:
            return None
        parts *= 2
    size = (samples + parts - 1) // parts
    return [{k: v[i:i + size] for k, v in tensors.items()} for i in range(0, samples, size)]


def train_step(ddp, optimizer, device, tensors: dict, samples: int, padded_pixels: int,
               split_on_oom: bool) -> int:
    """Forward, backward (one synchronised allreduce) and optimizer step. Returns the OOM events handled.

    When the batch does not fit (modelled by the emulated device, or a real CUDA OutOfMemoryError in the
    forward pass) and the batching strategy allows it, the batch is split into micro-batches whose
    gradients accumulate locally (no_sync) before the last one joins the allreduce.
    """
    optimizer.zero_grad(set_to_none=True)
    if not (split_on_oom and not device.fits(samples, padded_pixels)):
        try:
            device.begin_step(samples, padded_pixels)
            ddp(tensors).backward()
            optimizer.step()
            return 0
        except torch.OutOfMemoryError:
            if not split_on_oom:
                raise
            optimizer.zero_grad(set_to_none=True)
            device.empty_cache()
    per_sample = padded_pixels // max(samples, 1)
    parts = _micro_batches(tensors, samples, lambda n: device.fits(n, n * per_sample))
    if parts is None:
        raise torch.OutOfMemoryError("a single sample does not fit the device")
    for i, part in enumerate(parts):
        n = len(next(iter(part.values())))
        device.begin_step(n, n * per_sample)
        if i == len(parts) - 1:
            (ddp(part) * (n / samples)).backward()
        else:
            with ddp.no_sync():
                (ddp(part) * (n / samples)).backward()
            device.pad()
    optimizer.step()
    return 1


def shadow_step(ddp, optimizer, device, tensors: dict) -> None:
    """A zero-weight step for a rank without data, so the others' gradient allreduce completes."""
    optimizer.zero_grad(set_to_none=True)
    device.begin_step(0, 0)
    (ddp(tensors) * 0.0).backward()
    optimizer.step()


def run_cell(ctx: RankContext, cell: Cell) -> dict:
    """Train one cell on this rank; returns this rank's record (an OOM ends the cell, never the run)."""
    tr = ctx.scenario.training
    device = ctx.device
    torch.manual_seed(tr.seed)  # same initial weights on every rank (DDP also broadcasts them)
    model = TwoTower(tr.workload).to(device.torch_device)
    ddp = DDP(model)
    device.install(ddp)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=tr.lr, momentum=0.9)
    pipe = pipeline_builder.build(ctx, cell)
    split_on_oom = bool(getattr(pipe.batching, "splits_on_oom", False))
    window = window_steps(ctx, pipe.batch_sampler)
    total_steps = tr.warmup_steps + window
    recorder, tally, source = StepRecorder(window), CacheTally(), BatchSource(pipe)
    error, oom_events, shadow_steps, last_tensors = None, 0, 0, None
    window_start = window_end = None

    with MemorySampler() as memory:
        t_prev = time.perf_counter()
        step = 0
        while step < total_steps:
            if step == tr.warmup_steps and window_start is None:
                device.reset_peak()
                tally.mark_window()
                t_prev = window_start = time.perf_counter()
            batch = source.next()
            t_ready = time.perf_counter()
            tensors = _to_device(batch, device) if batch is not None else None
            t_h2d = time.perf_counter()
            samples = len(batch["index"]) if batch is not None else 0
            doomed = batch is not None and not split_on_oom and not device.fits(samples, batch["padded_pixels"])
            any_batch, any_doomed = agree(int(batch is not None), int(doomed))
            sync = time.perf_counter() - t_h2d
            if any_doomed:  # a batch that cannot fit ends the cell on every rank together
                error = "OOM: " + (device.oom_message(samples, batch["padded_pixels"]) if doomed
                                   else "a batch did not fit on another rank")
                break
            if not any_batch:  # every rank finished its epoch
                source.new_epoch()
                continue
            try:
                if batch is None:
                    shadow_step(ddp, optimizer, device, last_tensors)
                    shadow_steps += 1
                else:
                    oom_events += train_step(ddp, optimizer, device, tensors, samples,
                                             batch["padded_pixels"], split_on_oom)
                    last_tensors = tensors
            except torch.OutOfMemoryError as err:  # a real one the model did not foresee: fatal
                raise RuntimeError(f"out of device memory in {cell.id}: {err}") from err
            device.synchronize()
            t_end = time.perf_counter()
            if batch is not None:
                tally.update(batch["cache_stats"])
            observe = getattr(pipe.batch_sampler, "observe", None)
            if observe is not None:
                observe(device.last_bytes / device.capacity_bytes)
            if step >= tr.warmup_steps:
                recorder.add(wait=t_ready - t_prev, h2d=t_h2d - t_ready, compute=t_end - t_h2d, sync=sync,
                             padded=device.padded_s, samples=samples,
                             padded_pixels=batch["padded_pixels"] if batch else 0,
                             real_pixels=batch["real_pixels"] if batch else 0,
                             nbytes=batch["nbytes"] if batch else 0)
                window_end = t_end
            t_prev = t_end
            step += 1
            if ctx.progress is not None:
                ctx.progress(step, total_steps)
    consumed, completed_epochs = source.consumed, source.completed_epochs
    del source
    pipe.close()

    record = recorder.as_record()
    record.update(
        rank=ctx.rank,
        window_s=(window_end - window_start) if window_end and window_start else 0.0,
        steps=recorder.n,
        host_pss_peak=memory.peak_pss, host_rss_peak=memory.peak_rss, memory_samples=memory.samples,
        device_peak_bytes=int(device.peak_bytes), device_capacity_bytes=int(device.capacity_bytes),
        overruns=device.overruns, oom_events=oom_events, shadow_steps=shadow_steps,
        cache=tally.record(), error=error, param_digest=param_digest(model),
        consumed=consumed, completed_epochs=completed_epochs,
    )
    return record
