"""An OOM on one rank of a 2-rank DDP run must neither hang nor crash the other: the injection and
its two spawned ranks (command.py beside it prints the verdicts; `run_bench.py oomcheck`).

Rank 1 runs out of memory once, in one phase of one step: the forward pass, the backward pass
(part-way through DDP's bucketed gradient allreduce: the buckets are made small so that some are
already reduced) or the optimizer step. Injected (torch.OutOfMemoryError raised, on CPU over gloo)
or real (`real`: a CUDA allocation larger than the free memory, both ranks on GPU 0 over gloo: NCCL
refuses two ranks on one GPU). Two models: the features two-tower, and the same with BatchNorm
layers (buffers, as ResNet-50's 53).

What must hold (harness.train.ddpstep's policy), with splitting on (dynamic batching's safety net)
and off:
- forward, split on: every rank takes every step, only rank 1 had a step that raised (one), the
  replicas stay identical;
- backward, split on: the same (rank 1 lost that batch's gradient, the reduction was finished with
  zeros);
- every other case: every rank stops at the same step with an error naming the phase.
The ranks run the harness's own MeasuredLoop on batches held in memory (`holds` says whether a
case's outcome is the policy's). The ranks are spawned on a free port (harness.run.launch).

Each case gets a device of its own (`case_device`), as each case is a cell of its own: a CUDA
device remembers the smallest batch that ran out (CudaDevice.note_oom) and splits every later batch
that large ahead, so one device shared by the 12 cases made every case after the first real OOM
split ahead, or stop at its first step on a foreseen OOM. The injected run's device has that same
memory (`CudaLikeDevice`: CudaDevice's own note_oom and fits on the emulated device), so the CPU
run checks the logic the real run meets. Within a case the batches after the OOM are split ahead
too; they raised nothing and are no OOM events: `oom_events` and the check's `raised` (the OOMs the
step policy handled) both read 1 on rank 1.
"""
from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

WARMUP, WINDOW, BATCH = 1, 6, 8
AT_STEP = 3  # rank 1 runs out of memory in this step (1-based, warm-up included)
PHASES = ("forward", "backward", "optimizer step")
MODELS = ("two-tower", "batchnorm")
BUCKET_MB = 0.25  # several gradient buckets, so that a backward OOM leaves some reduced and some not


@dataclass(frozen=True)
class Case:
    model: str
    phase: str
    split: bool

    @property
    def goes_on(self) -> bool:
        """Splitting absorbs an OOM in forward or backward; nothing absorbs one in the optimizer
        step."""
        return self.split and self.phase != "optimizer step"

    @property
    def label(self) -> str:
        return f"{self.model}, OOM in {self.phase}, split {'on' if self.split else 'off'}"


class Trigger:
    """Fires once, on rank 1 at the chosen step: raises, or allocates more than the GPU has."""

    def __init__(self, rank: int, real: bool):
        self.armed, self.rank, self.real, self.step = True, rank, real, 0

    def fire(self, where: str) -> None:
        if not (self.armed and self.rank == 1 and self.step == AT_STEP):
            return
        self.armed = False
        if not self.real:
            raise torch.OutOfMemoryError(f"injected OOM on rank 1 in {where}")
        free, _ = torch.cuda.mem_get_info()
        torch.empty(2 * free + (1 << 30), dtype=torch.uint8, device="cuda")  # raises: a real OOM


class _BackwardOOM(torch.autograd.Function):
    """Identity forward; its backward fires the trigger (half-way down the image tower's
    gradients)."""

    @staticmethod
    def forward(ctx, x, trigger):
        ctx.trigger = trigger
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        ctx.trigger.fire("backward")
        return grad, None


class InjectOOM(nn.Module):
    """Wraps the model: counts steps (forward calls) and fires the trigger in the case's phase."""

    def __init__(self, inner: nn.Module, trigger: Trigger, phase: str):
        super().__init__()
        self.inner, self.trigger, self.phase = inner, trigger, phase
        if phase == "backward":
            head = self.inner.image
            # after the first layer (whose input needs no gradient) the backward passes through it
            self.inner.image = nn.Sequential(head[:-1], _Through(trigger), head[-1]) \
                if isinstance(head, nn.Sequential) else nn.Sequential(head, _Through(trigger))

    def forward(self, batch: dict) -> torch.Tensor:
        self.trigger.step += 1
        if self.phase == "forward":
            self.trigger.fire("forward")
        return self.inner(batch)


class _Through(nn.Module):
    def __init__(self, trigger: Trigger):
        super().__init__()
        self.trigger = trigger

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _BackwardOOM.apply(x, self.trigger)


def _optimizer(params, trigger: Trigger, phase: str) -> torch.optim.Optimizer:
    class InjectStepOOM(torch.optim.SGD):
        def step(self, closure=None):
            if phase == "optimizer step":
                trigger.fire("optimizer step")
            return super().step(closure)

    return InjectStepOOM(params, lr=0.01, momentum=0.9)


def build_model(name: str) -> nn.Module:
    from harness.device.standin import EMBED, TwoTower

    model = TwoTower("features")
    if name == "batchnorm":
        model.image = nn.Sequential(nn.Linear(2048, 256), nn.BatchNorm1d(256), nn.ReLU(), nn.Linear(256, EMBED))
        model.text = nn.Sequential(nn.Linear(768, 256), nn.BatchNorm1d(256), nn.ReLU(), nn.Linear(256, EMBED))
    return model


class SplitPolicy:
    def __init__(self, split: bool):
        self.splits_on_oom = split

    def observe(self, memory_fraction: float) -> None:
        pass


def _batches(n: int = 4) -> list[dict]:
    g = torch.Generator().manual_seed(0)
    return [{"index": torch.arange(i * BATCH, (i + 1) * BATCH), "nbytes": 0, "cache_stats": None,
             "padded_pixels": 0, "real_pixels": 0, "image_emb": torch.randn(BATCH, 2048, generator=g),
             "text_emb": torch.randn(BATCH, 768, generator=g)} for i in range(n)]


def _cuda_like_device():
    from harness.config.accelerators import get_accelerator
    from harness.device.devices import CudaDevice, EmulatedDevice

    class CudaLikeDevice(EmulatedDevice):
        """The emulated device that remembers OOMs as the CUDA device does: CudaDevice's own
        note_oom, fits (within the emulated memory too) and clear_memory_model."""

        memory_model = None
        oom_units = None
        note_oom = CudaDevice.note_oom
        predicted_bytes = CudaDevice.predicted_bytes
        clear_memory_model = CudaDevice.clear_memory_model

        def fits(self, samples: int, padded_pixels: int) -> bool:
            return CudaDevice.fits(self, samples, padded_pixels) and EmulatedDevice.fits(self, samples,
                                                                                          padded_pixels)

    return CudaLikeDevice(get_accelerator("V100-16GB"), "features")


def case_device(real: bool):
    """A fresh device for one case, whose note_oom also counts the OOMs raised in it
    (`raised_ooms`)."""
    if real:
        from harness.device.devices import CudaDevice

        torch.cuda.empty_cache()  # the previous case's model and optimizer state are gone
        device = CudaDevice(0)
    else:
        device = _cuda_like_device()
    device.raised_ooms = 0
    remember = device.note_oom

    def note_oom(samples: int, padded_pixels: int) -> None:
        device.raised_ooms += 1
        remember(samples, padded_pixels)

    device.note_oom = note_oom
    return device


def _rank(rank: int, world: int, port: int, cases: list[Case], real: bool, out: str) -> None:
    from harness.measure.telemetry import MemorySampler, NvmlSampler
    from harness.train.agreement import param_digest
    from harness.train.batches import InMemoryBatches
    from harness.train.ddpstep import make_ddp
    from harness.train.measuredloop import MeasuredLoop

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    for i, case in enumerate(cases):  # one after the other in the same process group, as a run's cells
        device = case_device(real)  # its own, as each cell's memory plan is its own (module docstring)
        torch.manual_seed(0)
        trigger = Trigger(rank, real)
        model = InjectOOM(build_model(case.model), trigger, case.phase).to(device.torch_device)
        ddp = make_ddp(model, bucket_cap_mb=BUCKET_MB)
        opt = _optimizer(ddp.parameters(), trigger, case.phase)
        loop = MeasuredLoop(device, ddp, opt, InMemoryBatches(_batches()), SplitPolicy(case.split), WARMUP,
                            WINDOW)
        with MemorySampler() as memory, NvmlSampler(None) as nvml:
            loop.run(memory, nvml)
        result = {"rank": rank, "steps": loop.step, "oom_events": loop.oom_events, "raised": device.raised_ooms,
                  "error": loop.error, "digest": param_digest(model)}
        Path(out, f"case{i}-rank{rank}.json").write_text(json.dumps(result))
    dist.destroy_process_group()


def run(cases: list[Case], real: bool = False, timeout_s: float = 30.0) -> list[list[dict] | None]:
    """Both ranks' results per case (None for a case that did not finish: a hang or a crash, after
    which no later case runs). A case may take timeout_s before it counts as a hang."""
    from harness.run.launch import free_port

    with tempfile.TemporaryDirectory() as out:
        ctx = mp.start_processes(_rank, args=(2, free_port(), cases, real, out), nprocs=2, join=False,
                                 start_method="spawn")
        deadline = time.monotonic() + timeout_s * (len(cases) + 1)  # + 1: the ranks' start
        try:
            while not ctx.join(timeout=0.2):
                if time.monotonic() > deadline:
                    for p in ctx.processes:
                        p.kill()
                    break
        except mp.ProcessRaisedException:
            pass  # a rank crashed: the cases it did not finish stay None
        return [_read(out, i) for i in range(len(cases))]


def _read(out: str, i: int) -> list[dict] | None:
    files = [Path(out, f"case{i}-rank{r}.json") for r in range(2)]
    return [json.loads(f.read_text()) for f in files] if all(f.exists() for f in files) else None


def holds(case: Case, ranks: list[dict]) -> bool:
    """The case's outcome is the policy's (module docstring)."""
    r0, r1 = ranks
    if r0["steps"] != r1["steps"]:
        return False
    if case.goes_on:  # one step raised, on rank 1; the steps split ahead after it count as OOM events too
        return (r0["steps"] == WARMUP + WINDOW and (r0["raised"], r1["raised"]) == (0, 1)
                and r0["oom_events"] == 0 and r1["oom_events"] >= 1
                and not r0["error"] and not r1["error"] and r0["digest"] == r1["digest"])
    return r0["steps"] < WARMUP + WINDOW and (r1["error"] or "").startswith(f"OOM in the {case.phase}") \
        and (r0["error"] or "").startswith("stopped with another rank")


def all_cases(models: tuple[str, ...] = MODELS) -> list[Case]:
    """Every phase, split on and off, for each of `models`."""
    return [Case(m, phase, split) for m in models for phase in PHASES for split in (True, False)]
