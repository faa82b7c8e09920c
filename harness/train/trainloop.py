"""One cell on one rank: build the pipeline, run warm-up and the measured window of DDP training steps.

A rank's wall time is accounted once, per step, into five parts that sum to the step (StepRecorder):
wait = blocked getting the next batch (including a new epoch's iterator), h2d = host-to-device copy,
peer_wait = the agreement with the other ranks (a tiny allreduce: where a fast rank waits for a slow one),
device = the accelerator computing forward + backward (with the real DDP allreduce) + optimizer step
(modelled on an emulated device, CUDA-event time on a GPU), overhead = the rest: host work that outlasts the
device time, and the step's bookkeeping. Steps are contiguous, so the parts of all steps sum to the window.

Ranks never hang: before every step they agree (one allreduce, on the host's gloo group: no wait for the
GPU there) whether any rank still has a batch and whether any rank failed. A rank whose epoch is over
while others still have batches takes a shadow step (a zero-weight step on a tiny batch that joins the
gradient allreduce), so every rank takes the same number of steps. A failed step is handled outside the
`except` block that caught it, so that its graph is freed before the shadow step that joins the peers; an
error that breaks the collective sequence (a failed shadow step or finish_reduction, a distributed-backend
error) aborts the process group and ends the rank (harness.train.ddpstep). Dynamic batching's memory
probe is agreed like a step: one rank's failure skips the cell on every rank. Each phase starts with a
barrier on the host (gloo) group, before its first collective on the training group: a rank lost while the
others built the pipeline is noticed there at once.

With --decompose a cell runs three phases (see run_cell); each phase is one MeasuredLoop.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from harness.config.matrix import Cell
from harness.config.scenario import Scenario
from harness.data import pagecache
from harness.device.standin import build_model
from harness.measure.rankrecord import Nvml, RankRecord
from harness.measure.steprecorder import CacheTally, StepRecorder
from harness.measure.telemetry import MemorySampler, NvmlSampler
from harness.train import pipeline
from harness.train.agreement import GroupAborted, agree, host_barrier, param_digest, window_steps
from harness.train.batches import BatchSource, InMemoryBatches, collect_batches, to_device
from harness.train.ddpstep import StepFailed, StepPrecision, is_oom, make_ddp, shadow_step, train_step

IN_MEMORY_BATCHES = 8  # batches held in memory for the compute-only phase


@dataclass
class RankContext:
    rank: int
    world_size: int
    scenario: Scenario
    device: object  # EmulatedDevice | CudaDevice
    data_paths: dict[str, Path]  # storage choice's label -> materialised directory (runconfig.materialise_all)
    progress: Callable[[int, int], None] | None = None
    local_rank: int = 0
    cache_state: str = "as-is"  # page cache before each cell: as-is, warm or cold
    decompose: bool = False
    build_pipeline: Callable | None = None  # the self-test's synthetic pipeline; None: the real one
    host_group: object = None  # gloo group for waits on host work (None: the default group)

    def files_of(self, cell: Cell) -> list[Path]:
        """The data files of the cell's storage (for page-cache control)."""
        storage = cell.choice("storage")
        return storage.create().files(self.data_paths[storage.label])


@dataclass
class StepTimes:
    """perf_counter stamps of one step: previous step's end, batch ready, on the device, agreement done,
    step end; and the last launch (the host's own work of the step done, before the wait for the device)."""

    start: float
    ready: float
    h2d: float
    agreed: float
    end: float
    launched: float | None = None


class MeasuredLoop:
    """Warm-up then the measured window of one phase on one rank; `record()` returns the phase's figures."""

    def __init__(self, device, ddp, optimizer, source, batching, warmup_steps: int, window: int,
                 progress: Callable[[int, int], None] | None = None, shared_stats=None, costs=None,
                 precision: StepPrecision | None = None, devprep=None, host_group=None):
        self.device, self.ddp, self.optimizer = device, ddp, optimizer
        self.host_group = host_group  # the per-step agreement's group (None: the default group)
        self.precision, self.devprep = precision, devprep
        self.loader_cpu_start = 0.0  # a thread loader's CPU seconds at the window's start
        self.source, self.batching = source, batching
        self.split_on_oom = bool(batching.splits_on_oom)
        self.warmup_steps, self.total_steps = warmup_steps, warmup_steps + window
        self.progress = progress
        self.costs = costs  # per-sample cost the balanced sampler balances (None: not known)
        self.recorder = StepRecorder(window)
        self.tally = CacheTally(shared_stats=shared_stats)
        self.error: str | None = None
        self.failed: str | None = None  # this rank's reason to stop the cell, told at the next agreement
        self.last_tensors: dict | None = None  # what a shadow step feeds the model
        self.oom_events = self.shadow_steps = self.step = 0
        self.window_start: float | None = None
        self.window_end: float | None = None
        self.cpu_start: float | None = None  # this process's CPU clock at the window's start
        self.t_prev = 0.0

    def run(self, memory: MemorySampler, nvml: NvmlSampler, prof=None) -> None:
        self.t_prev = time.perf_counter()
        while self.step < self.total_steps:
            if self.step == self.warmup_steps and self.window_start is None:
                self._start_window(memory, nvml)
            outcome = self._one_step()
            if outcome == "stop":
                break
            if outcome == "new epoch":
                continue
            if prof is not None:
                prof.step()
            if self.progress is not None:
                self.progress(self.step, self.total_steps)

    def _start_window(self, memory: MemorySampler, nvml: NvmlSampler) -> None:
        """Warm-up is over: peaks, cache counters and disk reads count from here."""
        self.device.reset_peak()
        self.tally.mark_window()
        memory.mark_window()
        nvml.mark_window()
        self.t_prev = self.window_start = time.perf_counter()
        self.cpu_start = time.process_time()
        self.loader_cpu_start = self.source.loader_thread_cpu_s()

    def _one_step(self) -> str:
        """Fetch, copy, agree, train: "step", "new epoch" (every rank ran dry) or "stop" (a rank failed)."""
        batch = self.source.next()
        t_ready = time.perf_counter()
        tensors = to_device(batch, self.device) if batch is not None else None
        t_h2d = time.perf_counter()
        samples = len(batch["index"]) if batch is not None else 0
        self._foresee_oom(batch, samples)
        any_batch, any_failed = agree(int(batch is not None), int(self.failed is not None), group=self.host_group)
        t_agreed = time.perf_counter()
        if any_failed:  # a batch that cannot fit ends the cell on every rank together
            self.error = self.failed or "stopped with another rank, which failed in this step (its reason is beside)"
            return "stop"
        if not any_batch:  # every rank finished its epoch
            self.source.new_epoch()
            return "new epoch"
        self.device.start_timer()
        measured = self.step >= self.warmup_steps
        self._train(batch, tensors, samples, measured)
        self.device.stop_timer()  # after the last launch, before the wait: host time after it is not device
        t_launched = time.perf_counter()
        self.device.synchronize()
        self.record_step(batch, samples, measured,
                         StepTimes(self.t_prev, t_ready, t_h2d, t_agreed, time.perf_counter(), t_launched))
        self.step += 1
        return "step"

    def _foresee_oom(self, batch: dict | None, samples: int) -> None:
        """A batch the device says will not fit, where the batching does not split: stop the cell."""
        if self.failed is None and batch is not None and not self.split_on_oom \
                and not self.device.fits(samples, batch["padded_pixels"]):
            self.failed = "OOM: " + self.device.oom_message(samples, batch["padded_pixels"])

    def _train(self, batch: dict | None, tensors: dict | None, samples: int, measured: bool) -> None:
        if batch is None:
            shadow_step(self.ddp, self.optimizer, self.device, self.last_tensors, self.precision)
            self.shadow_steps += measured
            return
        failed = self._train_batch(batch, tensors, samples, measured)
        if failed is not None:  # out of the except block: the failed step's graph is freed by now
            self._stop_cell(*failed, tensors)

    def _train_batch(self, batch: dict, tensors: dict, samples: int, measured: bool) -> tuple[str, bool] | None:
        """The step on this rank's batch; (reason, joined) when it failed (the policy of
        harness.train.ddpstep: this rank ends the cell), else None."""
        if self.devprep is not None:  # decode etc. on the device, in its time
            try:
                tensors["images"] = self.devprep.images(batch, self.device)
            except Exception as err:  # noqa: BLE001 - nvJPEG, its buffers: nothing collective happened yet
                return StepFailed("device preprocessing", err, oom=is_oom(err), joined=False).reason, False
        try:
            handled = train_step(self.ddp, self.optimizer, self.device, tensors, samples,
                                 batch["padded_pixels"], self.split_on_oom, self.precision)
        except GroupAborted:
            raise  # the process group is gone: the rank ends
        except StepFailed as err:
            return err.reason, err.joined
        except Exception as err:  # noqa: BLE001 - outside the step's phases: ends the cell as before
            return StepFailed("step", err, oom=is_oom(err), joined=False).reason, False
        self.oom_events += handled if measured else 0
        self.last_tensors = tensors
        return None

    def _stop_cell(self, reason: str, joined: bool, tensors: dict) -> None:
        """Told to every rank at the next agreement; a rank that has not joined this step's gradient
        allreduce joins it first with a zero-weight step on a tiny batch (the others wait there)."""
        self.failed = reason
        if not joined:
            self.device.empty_cache()
            shadow_step(self.ddp, self.optimizer, self.device, self.last_tensors or _placeholder(tensors),
                        self.precision)

    def record_step(self, batch: dict | None, samples: int, measured: bool, t: StepTimes) -> None:
        """The per-step bookkeeping: cache statistics, the batching's feedback, the step's figures. Its own
        time is added to the step's overhead, so the next step starts where this one's bookkeeping ends."""
        busy = t.end - t.agreed
        device_s = min(self.device.timed_compute_s(), busy)
        if batch is not None:  # not on shadow steps: they hold no batch
            self.tally.update(batch["cache_stats"])
            self.batching.observe(self.device.last_bytes / self.device.capacity_bytes)
        if measured:
            self.recorder.add(wait=t.ready - t.start, h2d=t.h2d - t.ready, peer_wait=t.agreed - t.h2d,
                              device=device_s, overhead=busy - device_s, padded=self.device.padded_s,
                              samples=samples, cost=self._cost(batch),
                              padded_pixels=batch["padded_pixels"] if batch else 0,
                              real_pixels=batch["real_pixels"] if batch else 0,
                              nbytes=batch["nbytes"] if batch else 0,
                              launch=(t.launched - t.agreed) if t.launched is not None else 0.0)
        self.t_prev = time.perf_counter()
        if measured:
            self.recorder.add_to_last("overhead", self.t_prev - t.end)
            self.window_end = self.t_prev

    def _cost(self, batch: dict | None) -> float:
        if batch is None or self.costs is None:
            return 0.0
        return float(self.costs[batch["index"].numpy()].sum())

    def _thread_cpu_s(self) -> float:
        """CPU seconds of a thread loader's threads over the window (0 for worker processes)."""
        return self.source.loader_thread_cpu_s() - self.loader_cpu_start if self.cpu_start is not None else 0.0

    def record(self, rank: int, memory: MemorySampler, nvml: NvmlSampler) -> RankRecord:
        device, source = self.device, self.source
        nvml_figures = nvml.figures()
        return RankRecord(
            **self.recorder.as_record(),
            rank=rank,
            window_s=(self.window_end - self.window_start) if self.window_end and self.window_start else 0.0,
            steps=self.recorder.n,
            host_pss_peak=memory.peak_pss, host_rss_peak=memory.peak_rss, memory_samples=memory.samples,
            disk_read_bytes=memory.disk_read_bytes,
            loader_cpu_s=memory.loader_cpu_s + self._thread_cpu_s(),
            loader_thread_cpu_s=self._thread_cpu_s(),
            rank_cpu_s=time.process_time() - self.cpu_start if self.cpu_start is not None else 0.0,
            device_peak_bytes=int(device.peak_bytes), device_capacity_bytes=int(device.capacity_bytes),
            overruns=device.overruns, oom_events=self.oom_events, shadow_steps=self.shadow_steps,
            cache=self.tally.record(), error=self.error, consumed=source.consumed,
            nvml=Nvml.from_json(nvml_figures) if nvml_figures is not None else None,
            completed_epochs=source.completed_epochs,
        )


class Trainer:
    """The model, its DDP wrapper and optimizer for one cell on one rank; runs measured phases."""

    def __init__(self, ctx: RankContext, cell: Cell):
        self.ctx, self.cell, self.tr = ctx, cell, ctx.scenario.training
        self.device = ctx.device
        cuda = not self.device.emulated
        strategy = cell.choice("precision").create()
        self.device.configure(strategy.rate, cell.choice("preprocess").create().where)
        self.precision = StepPrecision(strategy, cuda)
        torch.manual_seed(self.tr.seed)  # same initial weights on every rank (DDP also broadcasts them)
        self.model = build_model(self.tr.workload, cuda).to(self.device.torch_device)
        self.device.clear_memory_model()  # an earlier dynamic cell's plan is not this cell's
        if cuda and cell.choice("batching").create().splits_on_oom:  # dynamic: plan against this GPU
            from harness.device import memprobe

            failed = plan_memory(self.device, lambda: memprobe.measure(
                self.model, self.tr.workload, self.tr.image_size, self.precision, self.device.torch_device,
                device_preprocess=cell.choice("preprocess").create().where == "device",
                sharing=getattr(self.device, "sharing", 1)))
            if failed is not None:  # on every rank, before DDP's construction (collectives)
                raise CellSkipped(failed)
        self.ddp = make_ddp(self.model)
        self.optimizer = torch.optim.SGD(self.ddp.parameters(), lr=self.tr.lr, momentum=0.9)

    def build(self) -> pipeline.Pipeline:
        return (self.ctx.build_pipeline or pipeline.build)(self.ctx, self.cell)

    def prepare_page_cache(self, state: str) -> dict:
        """One process per node brings the cell's files into `state`; the others wait for it."""
        info = {"state": state}
        if state != "as-is":
            if self.ctx.local_rank == 0:
                info = pagecache.prepare(self.ctx.files_of(self.cell), state)
            dist.barrier(group=self.ctx.host_group)  # minutes for a large dataset: not under NCCL's timeout
        return info

    def phase(self, state: str, in_memory: bool = False, profiler=None) -> RankRecord:
        """Warm-up then the measured window, from the real pipeline or from batches held in memory. The
        record's `setup_s` says where the time outside the window went: building the pipeline, the page
        cache, warm-up (the loader's first batches included), closing the pipeline."""
        t0 = time.perf_counter()
        pipe = self.build()
        t1 = time.perf_counter()
        if in_memory:
            n = max(1, min(IN_MEMORY_BATCHES, len(pipe.batch_sampler)))
            source = InMemoryBatches(collect_batches(pipe, n))
            page_cache = {"state": "in-memory"}
        else:
            page_cache = self.prepare_page_cache(state)
            source = BatchSource(pipe, self.device)
        host_barrier(self.ctx.host_group)  # before the phase's first collective (module docstring)
        t2 = time.perf_counter()
        try:
            record, warmup_s = self._measure(pipe, source, profiler)
        finally:
            t3 = time.perf_counter()
            source.close()
            pipe.close()
        record.page_cache = page_cache
        record.setup_s = {"pipeline": round(t1 - t0, 4), "page_cache": round(t2 - t1, 4),
                          "warmup": round(warmup_s, 4), "close": round(time.perf_counter() - t3, 4)}
        return record

    def _measure(self, pipe: pipeline.Pipeline, source, profiler) -> tuple[RankRecord, float]:
        loop = MeasuredLoop(self.device, self.ddp, self.optimizer, source, pipe.batching,
                            self.tr.warmup_steps, window_steps(self.tr, len(pipe.batch_sampler)),
                            progress=self.ctx.progress, shared_stats=pipe.shared_cache_stats(),
                            costs=pipe.costs, precision=self.precision, devprep=pipe.devprep,
                            host_group=self.ctx.host_group)
        # the profiler outermost: its trace is exported at its exit, after the samplers' windows have ended
        with (profiler or nullcontext()) as prof, MemorySampler() as memory, \
                NvmlSampler(self.device.nvml_index) as nvml:
            started = time.perf_counter()
            loop.run(memory, nvml, prof)
        warmup_s = (loop.window_start or time.perf_counter()) - started
        record = loop.record(self.ctx.rank, memory, nvml)
        record.workers = self.tr.workers
        record.loader, record.model, record.precision = pipe.loader_kind, self.model.name, self.precision.label
        record.preprocess = "device" if pipe.devprep is not None else "host"
        return record, warmup_s


class CellSkipped(RuntimeError):
    """Every rank skips the cell together, before training (its text is the cell's error)."""


def plan_memory(device, measure: Callable[[], tuple[float, float, float]]) -> str | None:
    """Dynamic batching's memory plan (`measure`: harness.device.memprobe.measure), set on the device, and
    agreed: a probe that fails on one rank (an OOM at its batches) is every rank's reason to skip the cell,
    never a rank that dies while its peers construct DDP. Returns that reason, or None."""
    error = None
    try:
        device.set_memory_model(*measure())
    except Exception as err:  # noqa: BLE001 - told to the peers below, outside this block
        error = f"{'OOM' if is_oom(err) else 'error'} in the memory probe: {type(err).__name__}: {err}"
    if error is not None:  # the probe's graph is freed by now
        device.empty_cache()
    if agree(int(error is not None))[0]:
        return error or "stopped with another rank, whose memory probe failed (its reason is beside)"
    return None


def _placeholder(tensors: dict) -> dict:
    """A batch whose device preprocessing failed: its tensors with blank 32x32 images for a shadow step."""
    out = dict(tensors)
    if "images" not in out:
        first = next(iter(out.values()))
        out["images"] = torch.zeros((len(first), 3, 32, 32), dtype=torch.uint8, device=first.device)
    return out


def run_cell(ctx: RankContext, cell: Cell, profiler=None) -> RankRecord:
    """Train one cell on this rank and return its record (an OOM ends the cell, never the run).

    With ctx.decompose, three phases follow one another (the differential method of "Analyzing and
    Mitigating Data Stalls in DNN Training", VLDB 2021): compute alone on batches held in memory, the
    pipeline with the dataset in the page cache, and with the page cache dropped. The cell's figures come
    from the phase matching ctx.cache_state (warm unless cold was asked for).
    """
    started = time.perf_counter()
    unsupported = StepPrecision.unsupported(cell.choice("precision").create(), ctx.device.torch_device)
    host_barrier(ctx.host_group)  # before the cell's first collective (module docstring)
    if agree(int(unsupported is not None))[0]:  # every rank skips the cell together
        return RankRecord(rank=ctx.rank, error=f"unsupported: {unsupported or 'on another rank'}")
    try:
        trainer = Trainer(ctx, cell)
    except CellSkipped as err:
        return RankRecord(rank=ctx.rank, error=str(err))
    model_s = time.perf_counter() - started
    if not ctx.decompose:
        record = trainer.phase(ctx.cache_state, profiler=profiler)
    else:
        compute = trainer.phase("as-is", in_memory=True)
        warm = trainer.phase("warm", profiler=profiler if ctx.cache_state != "cold" else None)
        cold = trainer.phase("cold", profiler=profiler if ctx.cache_state == "cold" else None)
        record = cold if ctx.cache_state == "cold" else warm
        record.phases = {"compute": compute.phase_summary(), "warm": warm.phase_summary(),
                         "cold": cold.phase_summary()}
    record.param_digest = param_digest(trainer.model)
    record.setup_s = {"model": round(model_s, 4), **record.setup_s}
    return record
