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
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from harness import pipeline
from harness import pagecache
from harness.matrix import Cell
from harness.gpu import NvmlSampler
from harness.memory import MemorySampler
from harness.recorder import CacheTally, StepRecorder
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
    local_rank: int = 0
    cache_state: str = "as-is"  # page cache before each cell: as-is, warm or cold
    decompose: bool = False
    build_pipeline: Callable | None = None  # the self-test's synthetic pipeline; None: the real one

    def files_of(self, cell: Cell) -> list[Path]:
        """The data files of the cell's storage (for page-cache control)."""
        storage = cell.choice("storage")
        return storage.create().files(self.data_paths[storage.name])


def param_digest(model: torch.nn.Module) -> str:
    """A hash of every parameter's bytes: equal on all ranks iff DDP kept the replicas identical."""
    h = hashlib.sha1()
    for p in model.parameters():
        h.update(p.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def agree(*values: int) -> list[int]:
    """The maximum of each integer over all ranks (one allreduce; on the GPU where NCCL needs it)."""
    on = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else None
    t = torch.tensor(values, dtype=torch.int64, device=on)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.tolist()


def window_steps(ctx: RankContext, batch_sampler) -> int:
    """Measured steps: --steps, or --epochs worth of the longest rank's batches, agreed by all ranks."""
    tr = ctx.scenario.training
    return agree(tr.steps or tr.epochs * len(batch_sampler))[0]


class BatchSource:
    """This rank's batches across epochs; None once its epoch is over, until every rank's is."""

    def __init__(self, pipe: pipeline.Pipeline):
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

    def close(self) -> None:
        """Drop the DataLoader iterator, which shuts its workers down."""
        self._it = None


def _to_device(batch: dict, device) -> dict:
    tensors = {k: batch[k].to(device.torch_device, non_blocking=True) for k in TENSOR_KEYS if k in batch}
    device.synchronize()
    return tensors


def _split(tensors: dict, samples: int, parts: int) -> list[dict]:
    size = -(-samples // parts)
    return [{k: v[i:i + size] for k, v in tensors.items()} for i in range(0, samples, size)]


def _accumulate(ddp, device, parts: list[dict], samples: int, per_sample: int) -> None:
    """Forward and backward of each micro-batch; gradients accumulate locally (no_sync) and the last
    micro-batch's backward joins the allreduce."""
    for i, part in enumerate(parts):
        n = len(next(iter(part.values())))
        device.begin_step(n, n * per_sample)
        if i == len(parts) - 1:
            (ddp(part) * (n / samples)).backward()
        else:
            with ddp.no_sync():
                (ddp(part) * (n / samples)).backward()
            device.pad()


def train_step(ddp, optimizer, device, tensors: dict, samples: int, padded_pixels: int,
               split_on_oom: bool) -> int:
    """Forward, backward (one synchronised allreduce) and optimizer step. Returns the OOM events handled.

    When the batch does not fit and the batching strategy allows it, the batch is split into 2, 4, 8...
    micro-batches whose gradients accumulate locally (no_sync) before the last one joins the allreduce.
    The emulated device knows in advance what fits; on a real GPU each split is tried until one runs
    without torch.OutOfMemoryError. Without splitting, the error propagates to the caller.
    """
    optimizer.zero_grad(set_to_none=True)
    per_sample = padded_pixels // max(samples, 1)
    parts = 1
    while parts <= samples and not device.fits(-(-samples // parts), -(-samples // parts) * per_sample):
        parts *= 2
    if parts == 1 or not split_on_oom:
        try:
            device.begin_step(samples, padded_pixels)
            ddp(tensors).backward()
            optimizer.step()
            return 0
        except torch.OutOfMemoryError:
            if not split_on_oom:
                raise
            parts = 2
    while True:
        if parts > samples:
            raise torch.OutOfMemoryError("a single sample does not fit the device")
        optimizer.zero_grad(set_to_none=True)
        device.empty_cache()
        try:
            _accumulate(ddp, device, _split(tensors, samples, parts), samples, per_sample)
            break
        except torch.OutOfMemoryError:  # a real GPU: try smaller micro-batches
            parts *= 2
    optimizer.step()
    return 1


def shadow_step(ddp, optimizer, device, tensors: dict) -> None:
    """A zero-weight step for a rank without data, so the others' gradient allreduce completes."""
    optimizer.zero_grad(set_to_none=True)
    device.begin_step(0, 0)
    (ddp(tensors) * 0.0).backward()
    optimizer.step()


class InMemoryBatches:
    """A few real batches held in memory and replayed: the pipeline with data loading taken out."""

    def __init__(self, batches: list[dict]):
        self.batches = batches
        self.i = 0
        self.epoch = self.completed_epochs = 0
        self.consumed: dict[int, list[int]] = {}

    def next(self) -> dict:
        batch = self.batches[self.i % len(self.batches)]
        self.i += 1
        return batch

    def new_epoch(self) -> None:  # never reached: next() never runs dry
        pass

    def close(self) -> None:
        self.batches = []


def collect_batches(pipe: pipeline.Pipeline, n: int) -> list[dict]:
    source, out = BatchSource(pipe), []
    while len(out) < n:
        batch = source.next()
        if batch is None:
            if not out:
                break
            source.new_epoch()
            continue
        out.append(batch)
    source.close()
    return out


class Trainer:
    """The model, its DDP wrapper and optimizer for one cell on one rank; runs measured phases."""

    def __init__(self, ctx: RankContext, cell: Cell):
        self.ctx, self.cell, self.tr = ctx, cell, ctx.scenario.training
        self.device = ctx.device
        torch.manual_seed(self.tr.seed)  # same initial weights on every rank (DDP also broadcasts them)
        self.model = TwoTower(self.tr.workload).to(self.device.torch_device)
        self.ddp = DDP(self.model)
        self.optimizer = torch.optim.SGD(self.ddp.parameters(), lr=self.tr.lr, momentum=0.9)

    def build(self) -> pipeline.Pipeline:
        return (self.ctx.build_pipeline or pipeline.build)(self.ctx, self.cell)

    def prepare_page_cache(self, state: str) -> dict:
        """One process per node brings the cell's files into `state`; the others wait for it."""
        info = {"state": state}
        if state != "as-is":
            if self.ctx.local_rank == 0:
                info = pagecache.prepare(self.ctx.files_of(self.cell), state)
            dist.barrier()
        return info

    def phase(self, state: str, in_memory: bool = False, profiler=None) -> dict:
        """Warm-up then the measured window, from the real pipeline or from batches held in memory."""
        pipe = self.build()
        if in_memory:
            source = InMemoryBatches(collect_batches(pipe, max(1, min(8, len(pipe.batch_sampler)))))
            page_cache = {"state": "in-memory"}
        else:
            page_cache = self.prepare_page_cache(state)
            source = BatchSource(pipe)
        try:
            record = self._run(pipe, source, profiler)
        finally:
            source.close()
            pipe.close()
        record["page_cache"] = page_cache
        return record

    def _run(self, pipe, source, profiler) -> dict:
        tr, device, ctx = self.tr, self.device, self.ctx
        split_on_oom = bool(getattr(pipe.batching, "splits_on_oom", False))
        window = window_steps(ctx, pipe.batch_sampler)
        total_steps = tr.warmup_steps + window
        recorder = StepRecorder(window)
        tally = CacheTally(shared_stats=getattr(pipe.loader.dataset, "shared_stats", None))
        error, oom_events, shadow_steps, last_tensors, failed = None, 0, 0, None, None
        window_start = window_end = None
        observe = getattr(pipe.batch_sampler, "observe", None)
        profiler = profiler or nullcontext()

        with MemorySampler() as memory, NvmlSampler(device.nvml_index) as nvml, profiler as prof:
            t_prev = time.perf_counter()
            step = 0
            while step < total_steps:
                if step == tr.warmup_steps and window_start is None:
                    device.reset_peak()
                    tally.mark_window()
                    memory.mark_window()
                    nvml.mark_window()
                    t_prev = window_start = time.perf_counter()
                batch = source.next()
                t_ready = time.perf_counter()
                tensors = _to_device(batch, device) if batch is not None else None
                t_h2d = time.perf_counter()
                samples = len(batch["index"]) if batch is not None else 0
                if failed is None and batch is not None and not split_on_oom \
                        and not device.fits(samples, batch["padded_pixels"]):
                    failed = "OOM: " + device.oom_message(samples, batch["padded_pixels"])
                any_batch, any_failed = agree(int(batch is not None), int(failed is not None))
                sync = time.perf_counter() - t_h2d
                if any_failed:  # a batch that cannot fit ends the cell on every rank together
                    error = failed or "OOM: a batch did not fit on another rank"
                    break
                if not any_batch:  # every rank finished its epoch
                    source.new_epoch()
                    continue
                device.start_timer()
                measured = step >= tr.warmup_steps
                if batch is None:
                    shadow_step(self.ddp, self.optimizer, device, last_tensors)
                    shadow_steps += measured
                else:
                    try:
                        handled = train_step(self.ddp, self.optimizer, device, tensors, samples,
                                             batch["padded_pixels"], split_on_oom)
                        oom_events += handled if measured else 0
                        last_tensors = tensors
                    except torch.OutOfMemoryError as err:  # real, unforeseen, no split allowed
                        # the others wait in this step's gradient allreduce: join it with a zero-weight
                        # step on one sample, then stop the cell on every rank at the next agreement
                        failed = f"OOM: {err}"
                        device.empty_cache()
                        shadow_step(self.ddp, self.optimizer, device, {k: v[:1] for k, v in tensors.items()})
                device.synchronize()
                t_end = time.perf_counter()
                gpu_compute = device.timed_compute_s()
                if batch is not None:
                    tally.update(batch["cache_stats"])
                    if observe is not None:  # not on shadow steps: they hold no batch
                        observe(device.last_bytes / device.capacity_bytes)
                if measured:
                    recorder.add(wait=t_ready - t_prev, h2d=t_h2d - t_ready, compute=t_end - t_h2d,
                                 sync=sync, padded=device.padded_s, gpu_compute=gpu_compute, samples=samples,
                                 padded_pixels=batch["padded_pixels"] if batch else 0,
                                 real_pixels=batch["real_pixels"] if batch else 0,
                                 nbytes=batch["nbytes"] if batch else 0)
                    window_end = t_end
                t_prev = t_end
                step += 1
                if prof is not None:
                    prof.step()
                if ctx.progress is not None:
                    ctx.progress(step, total_steps)

        record = recorder.as_record()
        record.update(
            rank=ctx.rank,
            window_s=(window_end - window_start) if window_end and window_start else 0.0,
            steps=recorder.n,
            host_pss_peak=memory.peak_pss, host_rss_peak=memory.peak_rss, memory_samples=memory.samples,
            disk_read_bytes=memory.disk_read_bytes,
            device_peak_bytes=int(device.peak_bytes), device_capacity_bytes=int(device.capacity_bytes),
            overruns=device.overruns, oom_events=oom_events, shadow_steps=shadow_steps,
            cache=tally.record(), error=error, consumed=source.consumed, nvml=nvml.figures(),
            completed_epochs=source.completed_epochs,
        )
        return record


def _phase_summary(record: dict) -> dict:
    return {k: record[k] for k in ("window_s", "steps", "samples", "error")}


def run_cell(ctx: RankContext, cell: Cell, profiler=None) -> dict:
    """Train one cell on this rank and return its record (an OOM ends the cell, never the run).

    With ctx.decompose, three phases follow one another (the differential method of "Analyzing and
    Mitigating Data Stalls in DNN Training", VLDB 2021): compute alone on batches held in memory, the
    pipeline with the dataset in the page cache, and with the page cache dropped. The cell's figures come
    from the phase matching ctx.cache_state (warm unless cold was asked for).
    """
    trainer = Trainer(ctx, cell)
    if not ctx.decompose:
        record = trainer.phase(ctx.cache_state, profiler=profiler)
    else:
        compute = trainer.phase("as-is", in_memory=True)
        warm = trainer.phase("warm", profiler=profiler if ctx.cache_state != "cold" else None)
        cold = trainer.phase("cold", profiler=profiler if ctx.cache_state == "cold" else None)
        record = cold if ctx.cache_state == "cold" else warm
        record["phases"] = {"compute": _phase_summary(compute), "warm": _phase_summary(warm),
                            "cold": _phase_summary(cold)}
    record["param_digest"] = param_digest(trainer.model)
    return record
