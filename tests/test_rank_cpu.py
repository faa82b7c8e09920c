"""The rank's CPU figure (`rank_cpu_s`) is its own work, without the CPU its host burns waiting for the device:
a CUDA host spins in stream and event synchronisation (and GradScaler's .item()) by default. Stand-ins
here spin where a CUDA host would; nothing needs a GPU."""
from __future__ import annotations

import time

import pytest
import torch

from harness.config.accelerators import get_accelerator
from harness.device.devices import CudaDevice, EmulatedDevice, WaitClock, wait_cpu_s
from harness.device.standin import build_model
from harness.measure.telemetry import MemorySampler, NvmlSampler
from harness.train import ddpstep, measuredloop
from harness.train.batches import InMemoryBatches
from harness.train.measuredloop import MeasuredLoop

STEP_S = 0.1  # the stand-in device's compute per step
WARMUP, WINDOW = 1, 8


def spin(seconds: float) -> float:
    """Busy-wait `seconds` of wall time, as a CUDA host does in a synchronize; its CPU seconds."""
    started, cpu = time.perf_counter(), time.thread_time()
    while time.perf_counter() - started < seconds:
        pass
    return time.thread_time() - cpu


class SpinningDevice(EmulatedDevice):
    """The emulated device whose host busy-waits out each step's compute instead of sleeping."""

    def __init__(self, sleeps: bool = False):
        super().__init__(get_accelerator("V100-16GB"), "features")
        self.sleeps, self.spun_s = sleeps, 0.0

    def begin_step(self, samples: int, padded_pixels: int) -> float:
        self._deadline = time.perf_counter() + STEP_S
        self._busy_s += STEP_S
        return STEP_S

    def pad(self) -> None:
        if self._deadline is None:
            return
        remaining, self._deadline = self._deadline - time.perf_counter(), None
        if remaining > 0:
            self.spun_s += 0.0 if self.sleeps and time.sleep(remaining) is None else spin(remaining)


class Fixed:
    splits_on_oom = False

    def observe(self, memory_fraction: float) -> None:
        pass


def batches(n: int = 4) -> list[dict]:
    g = torch.Generator().manual_seed(0)
    return [{"index": torch.arange(i * 8, (i + 1) * 8), "nbytes": 0, "cache_stats": None, "padded_pixels": 0,
             "real_pixels": 0, "image_emb": torch.randn(8, 2048, generator=g),
             "text_emb": torch.randn(8, 768, generator=g)} for i in range(n)]


def measured_loop(device, monkeypatch, source=None, warmup: int = WARMUP, window: int = WINDOW) -> MeasuredLoop:
    """One rank's loop on `device` over `source` (default: the batches in memory), in a world of one: the
    agreement is the rank's own flags."""
    monkeypatch.setattr(measuredloop, "agree", lambda *values, group=None: list(values))
    model = build_model("features", False)
    return MeasuredLoop(device, model, torch.optim.SGD(model.parameters(), lr=0.01),
                        source or InMemoryBatches(batches()), Fixed(), warmup, window)


def run_loop(loop: MeasuredLoop):
    """The loop run, and its record."""
    with MemorySampler() as memory, NvmlSampler(None) as nvml:
        loop.run(memory, nvml)
        return loop.record(0, memory, nvml)


def measured(device, monkeypatch):
    """One rank's measured window on `device`."""
    return run_loop(measured_loop(device, monkeypatch))


def test_the_rank_cpu_leaves_out_a_device_wait_that_spins(monkeypatch):
    device = SpinningDevice()
    record = measured(device, monkeypatch)
    assert record.steps == WINDOW and record.error is None
    window_spin = device.spun_s * WINDOW / (WARMUP + WINDOW)
    assert window_spin > 0.1  # the stand-in did burn CPU (less than its wall time on a busy machine)
    assert wait_cpu_s(device) >= device.spun_s  # counted as the device's wait
    assert 0 < record.rank_cpu_s < 0.5 * window_spin  # the process's CPU held the spin: the figure does not


def test_a_sleeping_emulated_device_keeps_the_process_cpu(monkeypatch):
    """The emulated device sleeps for its compute: its waits cost no CPU, so the figure is the process's."""
    device = SpinningDevice(sleeps=True)
    record = measured(device, monkeypatch)
    assert record.steps == WINDOW and device.spun_s == 0.0
    assert wait_cpu_s(device) < 0.02 and record.rank_cpu_s > 0


class SpinningStream:
    def __init__(self):
        self.spun_s, self.waits = 0.0, 0

    def synchronize(self) -> None:
        self.spun_s += spin(0.03)
        self.waits += 1

    def elapsed_time(self, end) -> float:
        return 12.0


def test_every_cuda_wait_is_counted_as_the_devices(monkeypatch):
    """CudaDevice's stream synchronize, a side-stream batch's event wait and the end event's wait in
    timed_compute_s each count their spin in its WaitClock (CUDA itself stood in for)."""
    stream = SpinningStream()
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: stream)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: 0)
    device = object.__new__(CudaDevice)
    device.torch_device, device.waits = torch.device("cuda", 0), WaitClock()
    device._start = device._end = stream
    device.synchronize()
    device.wait_event(stream)
    assert device.timed_compute_s() == pytest.approx(0.012)
    assert stream.waits == 3 and stream.spun_s > 0 and wait_cpu_s(device) >= stream.spun_s


class Scaler:
    """GradScaler's calls, in order: the inf check's .item() is in step."""

    def __init__(self, log: list[str]):
        self.log = log

    def scale(self, loss):
        return loss

    def unscale_(self, optimizer) -> None:
        self.log.append("unscale_")

    def step(self, optimizer) -> None:
        self.log.append("step (.item())")
        optimizer.step()

    def update(self) -> None:
        self.log.append("update")


def test_the_loss_scalers_wait_is_the_devices_synchronize():
    from strategies.registry import create, load_builtins

    load_builtins()
    log: list[str] = []
    precision = ddpstep.StepPrecision(create("precision", "amp"), cuda=False)
    precision.scaler = Scaler(log)
    device = SpinningDevice()
    device.synchronize = lambda: log.append("device wait")
    model = build_model("features", False)
    tensors = {k: v for k, v in batches(1)[0].items() if k in ("image_emb", "text_emb")}
    ddpstep.train_step(model, torch.optim.SGD(model.parameters(), lr=0.01), device, tensors, 8, 0, False,
                       precision)
    assert log == ["unscale_", "device wait", "step (.item())", "update"]
