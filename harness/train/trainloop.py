"""One cell on one rank: the model, its DDP wrapper and optimizer, the page cache, and the phases
(one, or three with --decompose: see run_cell), each phase's steps run by a
harness.train.measuredloop.MeasuredLoop.

Every rank runs a cell or every rank skips it: an unsupported precision and dynamic batching's
memory probe are agreed like a step (one rank's failure skips the cell on every rank). Each phase
starts with a barrier on the host (gloo) group, before its first collective on the training group:
a rank lost while the others built the pipeline is noticed there at once.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from harness.config.launchconfig import LaunchConfig
from harness.config.matrix import Cell
from harness.config.request import BenchRequest
from harness.config.scenario import Scenario
from harness.data import pagecache
from harness.device.standin import build_model
from harness.measure.rankrecord import RankRecord
from harness.measure.telemetry import MemorySampler, NvmlSampler
from harness.train import pipeline
from harness.train.agreement import agree, host_barrier, param_digest, window_steps
from harness.train.batches import BatchSource, InMemoryBatches, collect_batches
from harness.train.ddpstep import StepPrecision, is_oom, make_ddp
from harness.train.measuredloop import MeasuredLoop

IN_MEMORY_BATCHES = 8  # batches held in memory for the compute-only phase


@dataclass
class RankContext:
    """This rank in the run, built once per rank (harness.run.launch): its place (rank, world,
    local rank), its device and host group, the data it reads, and the launch it belongs to, held
    whole (`config`: the scenario, the cells and the run's frozen settings, config.request), never
    copied field by field."""
    rank: int
    world_size: int
    device: object  # EmulatedDevice | CudaDevice
    data_paths: dict[str, Path]  # storage choice's label -> materialised directory (launchconfig.materialise_all)
    config: LaunchConfig
    local_rank: int = 0
    host_group: object = None  # gloo group for waits on host work (None: the default group)
    build_pipeline: Callable | None = None  # the self-test's synthetic pipeline; None: the real one
    progress: Callable[[int, int], None] | None = None  # the visit's per-step callback (harness.run.rankloop)

    @classmethod
    def alone(cls, rank: int, world_size: int, scenario: Scenario, device, data_paths: dict[str, Path] | None = None,
              **rest) -> RankContext:
        """A rank outside a launch (the self-test's in-process cells, tests): the scenario with no
        command line behind it (the request's defaults)."""
        device_kind = "emulated" if device.emulated else "cuda"
        config = LaunchConfig(BenchRequest.bare(scenario.name), scenario, [], Path("."), device_kind)
        return cls(rank, world_size, device, data_paths or {}, config, **rest)

    @property
    def scenario(self) -> Scenario:
        return self.config.scenario

    @property
    def remote_counters(self) -> Path | None:
        """[remote]: the folder a remote reader appends its counters to
        (LaunchConfig.remote_counters)."""
        return self.config.remote_counters

    def files_of(self, cell: Cell) -> list[Path]:
        """The data files of the cell's storage (for page-cache control)."""
        storage = cell.choice("storage")
        return storage.create().files(self.data_paths[storage.label])


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
        """Warm-up then the measured window, from the real pipeline or from batches held in memory.
        The record's `setup_s` says where the time outside the window went: building the pipeline,
        the page cache, warm-up (the loader's first batches included), closing the pipeline."""
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
    """Dynamic batching's memory plan (`measure`: harness.device.memprobe.measure), set on the
    device, and agreed: a probe that fails on one rank (an OOM at its batches) is every rank's
    reason to skip the cell, never a rank that dies while its peers construct DDP. Returns that
    reason, or None."""
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


def run_cell(ctx: RankContext, cell: Cell, profiler=None) -> RankRecord:
    """Train one cell on this rank and return its record (an OOM ends the cell, never the run).

    With --decompose (ctx.config.request), three phases follow one another (the differential method
    of "Analyzing and Mitigating Data Stalls in DNN Training", VLDB 2021): compute alone on batches
    held in memory, the pipeline with the dataset in the page cache, and with the page cache
    dropped. The cell's figures come from the phase matching the run's --cache-state (warm unless
    cold was asked for).
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
    settings = ctx.config.request
    if not settings.decompose:
        record = trainer.phase(settings.cache_state, profiler=profiler)
    else:
        cold_run = settings.cache_state == "cold"
        compute = trainer.phase("as-is", in_memory=True)
        warm = trainer.phase("warm", profiler=None if cold_run else profiler)
        cold = trainer.phase("cold", profiler=profiler if cold_run else None)
        record = cold if cold_run else warm
        record.phases = {"compute": compute.phase_summary(), "warm": warm.phase_summary(),
                         "cold": cold.phase_summary()}
    record.param_digest = param_digest(trainer.model)
    record.setup_s = {"model": round(model_s, 4), **record.setup_s}
    return record
