"""The measured loop of one phase on one rank: warm-up, then the window of DDP training steps
(MeasuredLoop), and the phase's rank record.

A rank's wall time is accounted once, per step, into five parts that sum to the step
(StepRecorder): wait = blocked getting the next batch (including a new epoch's iterator), h2d =
host-to-device copy, peer_wait = the agreement with the other ranks (a tiny allreduce: where a fast
rank waits for a slow one), device = the accelerator computing forward + backward (with the real
DDP allreduce) + optimizer step (modelled on an emulated device, CUDA-event time on a GPU),
overhead = the rest: host work that outlasts the device time, and the step's bookkeeping. Steps are
contiguous, so the parts of all steps sum to the window.

Ranks never hang: before every step they agree (one allreduce, on the host's gloo group: no wait
for the GPU there) whether any rank still has a batch and whether any rank failed. A rank whose
epoch is over while others still have batches takes a shadow step (a zero-weight step on a tiny
batch that joins the gradient allreduce), so every rank takes the same number of steps. A failed
step is handled outside the `except` block that caught it, so that its graph is freed before the
shadow step that joins the peers; an error that breaks the collective sequence (a failed shadow
step or finish_reduction, a distributed-backend error) aborts the process group and ends the rank
(harness.train.ddpstep).

The rank's CPU (`rank_cpu_s`) is its process's CPU over the window less what its main thread spent
waiting for the device (harness.device.devices.WaitClock): a CUDA host spins in stream and event
synchronisation by default, and that spin is the GPU's time, not the rank's work. Its other threads
(receiving batches, a thread loader's, the pin-memory thread) stay in it, as before.

The rank's main thread's CPU (`rank_main_cpu_s`: the training steps, the agreement, the harness's
per-step work; less its waits for the device, as above) is read from its own thread clock beside
it: steadier than the process's, whose other threads (receiving batches ahead, the telemetry
sampler, the collectives' helpers) move it by about 20% between same-code runs. The fixed reference
work (harness.measure.reference) is timed READINGS times a visit on that thread, right after the
record's clocks are read: in no figure of the window, and nothing before the window (a pause there
would let the loader run ahead into it). The gates divide the main thread's and the decode stage's
CPU by it (harness.results.metrics.against_reference).
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from harness.device.devices import wait_cpu_s
from harness.measure import reference
from harness.measure.rankrecord import Nvml, RankRecord
from harness.measure.steprecorder import CacheTally, StepRecorder
from harness.measure.telemetry import MemorySampler, NvmlSampler
from harness.train.agreement import GroupAborted, agree
from harness.train.batches import to_device
from harness.train.ddpstep import StepFailed, StepPrecision, is_oom, shadow_step, train_step

READINGS = 2  # readings of the reference work a visit, after its window (module docstring)


@dataclass
class StepTimes:
    """perf_counter stamps of one step: previous step's end, batch ready, on the device, agreement
    done, step end; and the last launch (the host's own work of the step done, before the wait for
    the device)."""

    start: float
    ready: float
    h2d: float
    agreed: float
    end: float
    launched: float | None = None


class MeasuredLoop:
    """Warm-up then the measured window of one phase on one rank; `record()` returns the phase's
    figures."""

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
        self.wait_cpu_start = 0.0  # the device's wait CPU (harness.device.devices.wait_cpu_s) at that start
        self.main_cpu_start: float | None = None  # this (the main) thread's CPU clock at the window's start
        self.t_prev = 0.0
        self.epoch_starts: list[int] = []  # window steps whose wait began a new epoch's iterator

    def run(self, memory: MemorySampler, nvml: NvmlSampler, prof=None) -> None:
        self.t_prev = time.perf_counter()
        while self.step < self.total_steps:
            if self.step == self.warmup_steps and self.window_start is None:
                self._start_window(memory, nvml)
            outcome = self._one_step()
            if outcome == "stop":
                break
            if outcome == "new epoch":
                if self.window_start is not None:
                    self.epoch_starts.append(self.recorder.n)  # the next recorded step waits for it
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
        self.main_cpu_start = time.thread_time()
        self.wait_cpu_start = wait_cpu_s(self.device)
        self.loader_cpu_start = self.source.loader_thread_cpu_s()

    def _one_step(self) -> str:
        """Fetch, copy, agree, train: "step", "new epoch" (every rank ran dry) or "stop" (a rank
        failed)."""
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
        """A batch the device says will not fit, where the batching does not split: stop the
        cell."""
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
        """Told to every rank at the next agreement; a rank that has not joined this step's
        gradient allreduce joins it first with a zero-weight step on a tiny batch (the others wait
        there)."""
        self.failed = reason
        if not joined:
            self.device.empty_cache()
            shadow_step(self.ddp, self.optimizer, self.device, self.last_tensors or _placeholder(tensors),
                        self.precision)

    def record_step(self, batch: dict | None, samples: int, measured: bool, t: StepTimes) -> None:
        """The per-step bookkeeping: cache statistics, the batching's feedback, the step's figures.
        Its own time is added to the step's overhead, so the next step starts where this one's
        bookkeeping ends."""
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

    def rank_cpu_s(self) -> float:
        """The rank process's CPU seconds over the window, less its waits for the device (module
        docstring)."""
        if self.cpu_start is None:
            return 0.0
        waited = wait_cpu_s(self.device) - self.wait_cpu_start
        return max(0.0, time.process_time() - self.cpu_start - waited)

    def rank_main_cpu_s(self) -> float | None:
        """The main thread's CPU seconds over the window, less its waits for the device (None: no
        window)."""
        if self.main_cpu_start is None:
            return None
        waited = wait_cpu_s(self.device) - self.wait_cpu_start
        return max(0.0, time.thread_time() - self.main_cpu_start - waited)

    def _thread_cpu_s(self) -> float:
        """CPU seconds of a thread loader's threads over the window (0 for worker processes)."""
        return self.source.loader_thread_cpu_s() - self.loader_cpu_start if self.cpu_start is not None else 0.0

    def record(self, rank: int, memory: MemorySampler, nvml: NvmlSampler) -> RankRecord:
        device, source = self.device, self.source
        nvml_figures = nvml.figures()
        rank_cpu_s, main_cpu_s, thread_cpu_s = self.rank_cpu_s(), self.rank_main_cpu_s(), self._thread_cpu_s()
        # after the window's clocks are read: in no figure of it
        readings = [reference.measure() for _ in range(READINGS)] if self.window_start is not None else []
        return RankRecord(
            **self.recorder.as_record(),
            rank=rank,
            window_s=(self.window_end - self.window_start) if self.window_end and self.window_start else 0.0,
            window_end_at=self.window_end,
            steps=self.recorder.n,
            host_pss_peak=memory.peak_pss, host_rss_peak=memory.peak_rss, memory_samples=memory.samples,
            disk_read_bytes=memory.disk_read_bytes,
            loader_cpu_s=memory.loader_cpu_s + thread_cpu_s,
            loader_thread_cpu_s=thread_cpu_s,
            rank_cpu_s=rank_cpu_s, rank_main_cpu_s=main_cpu_s,
            device_peak_bytes=int(device.peak_bytes), device_capacity_bytes=int(device.capacity_bytes),
            overruns=device.overruns, oom_events=self.oom_events, shadow_steps=self.shadow_steps,
            cache=self.tally.record(), error=self.error, consumed=source.consumed,
            nvml=Nvml.from_json(nvml_figures) if nvml_figures is not None else None,
            completed_epochs=source.completed_epochs,
            epoch_starts=[i for i in self.epoch_starts if i < self.recorder.n],
            reference=reference.combine(readings),
        )


def _placeholder(tensors: dict) -> dict:
    """A batch whose device preprocessing failed: its tensors with blank 32x32 images for a shadow
    step."""
    out = dict(tensors)
    if "images" not in out:
        first = next(iter(out.values()))
        out["images"] = torch.zeros((len(first), 3, 32, 32), dtype=torch.uint8, device=first.device)
    return out
