"""The accelerator a rank trains on: a real CUDA device, or an emulated one.

The emulated device behaves like a GPU host. The rank runs a real step on the CPU (forward,
backward with DDP's real gradient allreduce over gloo, optimizer step) of a deliberately cheap
stand-in model, so that its host work is a small part of the modelled step, then sleeps until the
modelled step time of the catalogue entry has passed: the CPU is left to the DataLoader workers, as
on a real GPU node. The step lasts max(host work, modelled time); a step whose host work outlasts
the model is an overrun, and that excess is host overhead, never device time. The ranks agree
before every step, so a rank whose data came late holds up the others there, as a straggler does on
real GPUs.

Per cell, `configure(rate, preprocess)` applies the precision and preprocess strategies. On the
emulated device they change only the model: the catalogue rate ("amp" or "fp32") and its memory,
and with device preprocessing the modelled decode time of the batch's JPEGs (`add_preprocess`); the
stand-in runs fp32 on the CPU either way. On CUDA the memory budget of dynamic batching is measured
(`set_memory_model`).

Both devices answer `timed_compute_s()`: the seconds the accelerator computed since
`start_timer()`, modelled on the emulated device, CUDA-event time on a GPU. That is the `device`
part of a step.

Both count in `waits` (WaitClock) the CPU seconds the calling thread spends waiting for the device:
on CUDA the host spins in a stream or event synchronisation by default, and that spin is not the
rank's own work (the rank's CPU figure leaves it out); the emulated device sleeps for its compute,
which costs no CPU.
"""
from __future__ import annotations

import os
import time
from contextlib import contextmanager

import torch

from harness.config.accelerators import Accelerator
from harness.errors import UsageError


def run_device_name(accelerator: str, device: str, sharing: int = 1) -> str:
    """The run's device as cells.jsonl and the baseline name it: on CUDA the GPUs' name (names
    joined with "+" when they differ), with ", N ranks per GPU" when ranks share a GPU
    (--share-gpu: not the device one rank has to itself); on an emulated run "<accelerator>
    (emulated)"."""
    if device == "cuda":
        names = dict.fromkeys(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
        return ("+".join(names) or "cuda") + (f", {sharing} ranks per GPU" if sharing > 1 else "")
    return f"{accelerator} (emulated)"


class WaitClock:
    """CPU seconds the calling thread spent inside the device's waits (`with clock.waiting():`):
    what a host that spins while it waits for the GPU burns, to be left out of the rank's own
    CPU."""

    def __init__(self):
        self.cpu_s = 0.0

    @contextmanager
    def waiting(self):
        started = time.thread_time()
        try:
            yield
        finally:
            self.cpu_s += time.thread_time() - started


def wait_cpu_s(device) -> float:
    """The CPU seconds `device` has counted in its waits (0 for a device without a WaitClock)."""
    waits = getattr(device, "waits", None)
    return waits.cpu_s if isinstance(waits, WaitClock) else 0.0


def uuid_text(uuid) -> str:
    """A device UUID as comparable text: NVML writes `GPU-1A2b...` (bytes in old bindings), torch
    prints `1a2b...`; both are lower-cased without the `GPU-` prefix. MIG UUIDs keep their `mig-`
    prefix."""
    text = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
    text = text.strip().lower()
    return text[4:] if text.startswith("gpu-") else text


class EmulatedDevice:
    emulated = True

    def __init__(self, accelerator: Accelerator, workload: str):
        self.accelerator = accelerator
        self.workload = workload
        self.torch_device = torch.device("cpu")
        self.peak_bytes = 0
        self.overruns = 0  # steps whose real CPU time exceeded the modelled time
        self.padded_s = 0.0  # sleep added to the current step
        self.last_bytes = 0
        self._deadline = None
        self._busy_s = 0.0  # modelled device seconds since start_timer()
        self.rate = "amp"  # the catalogue rate the cell's precision selects
        self.preprocess = "host"
        self._pending_s = 0.0  # modelled device preprocessing, added to the next begin_step
        self.waits = WaitClock()  # a sleep: about no CPU

    def configure(self, rate: str = "amp", preprocess: str = "host") -> None:
        self.rate, self.preprocess = rate, preprocess

    def add_preprocess(self, source_pixels: int) -> None:
        """Decode, resize, flip and normalise of JPEGs with `source_pixels` pixels, on the device:
        modelled."""
        self._pending_s += self.accelerator.decode_seconds(source_pixels)

    def _need(self, samples: int, padded_pixels: int) -> int:
        return self.accelerator.memory_needed(self.workload, samples, padded_pixels, self.rate)

    @property
    def name(self) -> str:
        return run_device_name(self.accelerator.name, "emulated")

    @property
    def capacity_bytes(self) -> int:
        return self.accelerator.memory_bytes

    def fits(self, samples: int, padded_pixels: int) -> bool:
        return self._need(samples, padded_pixels) <= self.capacity_bytes

    def oom_message(self, samples: int, padded_pixels: int) -> str:
        need = self._need(samples, padded_pixels)
        return (f"emulated {self.accelerator.name}: a batch of {samples} needs {need / 1e9:.1f} GB of "
                f"{self.capacity_bytes / 1e9:.1f} GB")

    def empty_cache(self) -> None:
        pass

    def note_oom(self, samples: int, padded_pixels: int) -> None:
        pass  # the model already knows what fits

    def clear_memory_model(self) -> None:
        pass

    def begin_step(self, samples: int, padded_pixels: int) -> float:
        """Model the step: raise OutOfMemoryError as a real GPU would; return the modelled
        seconds."""
        if not self.fits(samples, padded_pixels):
            raise torch.OutOfMemoryError(self.oom_message(samples, padded_pixels))
        need = self._need(samples, padded_pixels)
        self.last_bytes = need
        self.peak_bytes = max(self.peak_bytes, need)
        modelled = self.accelerator.step_seconds(self.workload, samples, padded_pixels, self.rate)
        modelled += self._pending_s
        self._pending_s = 0.0
        self._deadline = time.perf_counter() + modelled
        self._busy_s += modelled
        self.padded_s = 0.0
        return modelled

    def pad(self) -> None:
        """Sleep until the modelled compute time of this step has passed (once per step)."""
        if self._deadline is None:
            return
        remaining = self._deadline - time.perf_counter()
        self._deadline = None
        if remaining > 0:
            time.sleep(remaining)
            self.padded_s = remaining
        else:
            self.overruns += 1

    def synchronize(self) -> None:
        with self.waits.waiting():
            self.pad()  # the end of the step: wait out the rest of the modelled time

    nvml_index = None  # no NVML telemetry for an emulated device

    def start_timer(self) -> None:
        self._busy_s = 0.0

    def stop_timer(self) -> None:
        pass  # modelled time: nothing to record

    def timed_compute_s(self) -> float:
        """Modelled device seconds of the micro-batches begun since start_timer()."""
        return self._busy_s

    def reset_peak(self) -> None:
        self.peak_bytes = 0
        self.overruns = 0


class CudaDevice:
    """A real GPU: compute timed with CUDA events around the step's launched work, memory from the
    caching allocator's peak (reset once per step, read once per step).

    `device` time on CUDA is the span between an event recorded before the step's first launch and
    one recorded right after its last launch (stop_timer), measured on the GPU's own clock. Host
    time after the last launch (the wait for the GPU, the step's bookkeeping) is not in it. What it
    still holds: gaps where the GPU waited for the host between launches inside the step (a
    launch-bound model, GradScaler's inf check) and a wait for a slower peer inside DDP's gradient
    allreduce. The profiler's kernel time on sampled steps (--profile) is the GPU-busy time without
    those gaps; scripts/gpu_check.sh compares the two.
    """

    emulated = False

    def __init__(self, local_rank: int, local_ranks: int = 1, share: bool = False):
        """`share` (--share-gpu): the node's `local_ranks` ranks share its GPUs round-robin (over
        gloo)."""
        index = gpu_index(local_rank, share)
        torch.cuda.set_device(index)
        self.torch_device = torch.device("cuda", index)
        self.sharing = ranks_per_gpu(local_ranks, torch.cuda.device_count()) if share else 1
        self.nvml_index = nvml_index_of(index)
        self.overruns = 0
        self.padded_s = 0.0
        self._window_peak = 0
        self._step_peak = 0
        self._start = torch.cuda.Event(enable_timing=True)
        self._end = torch.cuda.Event(enable_timing=True)
        self.waits = WaitClock()  # the host's spin in this device's synchronisations
        self.memory_model = None  # (base bytes, bytes per unit, budget bytes) measured by a probe, or None
        self.oom_units: float | None = None  # the smallest batch (padded pixels or samples) that ran out
        # No autotuning: batch shapes vary (padding to each batch's largest image, dynamic batch sizes), and
        # cudnn.benchmark would tune inside measured steps, for seconds, differently on every rank.
        torch.backends.cudnn.benchmark = False

    def configure(self, rate: str = "amp", preprocess: str = "host") -> None:
        pass  # a real GPU runs the precision (ddpstep.StepPrecision) and the preprocessing itself

    def add_preprocess(self, source_pixels: int) -> None:
        pass  # the decode runs on the GPU and is timed with the step

    def set_memory_model(self, base: float, per_unit: float, budget: float) -> None:
        """Measured: a step needs base + per_unit x units bytes (units: padded pixels, or samples
        for features); `budget` = bytes this process may use (free + its own allocations)."""
        self.memory_model = (base, per_unit, budget)

    def clear_memory_model(self) -> None:
        """A cell without dynamic batching: no plan from an earlier cell's probe (it stopped fixed
        cells on false OOMs)."""
        self.memory_model, self.oom_units = None, None

    def predicted_bytes(self, samples: int, padded_pixels: int) -> float | None:
        if self.memory_model is None:
            return None
        base, per_unit, _ = self.memory_model
        return base + per_unit * (padded_pixels or samples)

    def note_oom(self, samples: int, padded_pixels: int) -> None:
        """A real OOM at this size: later batches this large are split ahead instead of failing
        again."""
        units = padded_pixels or samples
        self.oom_units = units if self.oom_units is None else min(self.oom_units, units)

    def start_timer(self) -> None:
        self._window_peak = max(self._window_peak, self._step_peak)
        torch.cuda.reset_peak_memory_stats(self.torch_device)
        self._start.record()

    def stop_timer(self) -> None:
        self._end.record()

    def timed_compute_s(self) -> float:
        """GPU time between start_timer() and stop_timer() (waits for the end event); the step's
        memory peak is read here, once."""
        with self.waits.waiting():
            self._end.synchronize()
        self._step_peak = torch.cuda.max_memory_allocated(self.torch_device)
        return self._start.elapsed_time(self._end) / 1e3

    @property
    def name(self) -> str:
        return run_device_name("", "cuda", self.sharing)

    @property
    def last_bytes(self) -> int:
        """Peak bytes allocated during the last step (all its micro-batches)."""
        return self._step_peak

    @property
    def peak_bytes(self) -> int:
        return max(self._window_peak, self._step_peak)

    @property
    def capacity_bytes(self) -> int:
        return torch.cuda.get_device_properties(self.torch_device).total_memory

    def fits(self, samples: int, padded_pixels: int) -> bool:
        """From the measured memory model and the OOMs seen; else True (the GPU tells by
        raising)."""
        units = padded_pixels or samples
        if self.oom_units is not None and units >= self.oom_units:
            return False
        need = self.predicted_bytes(samples, padded_pixels)
        return need is None or need <= self.memory_model[2]

    def oom_message(self, samples: int, padded_pixels: int) -> str:
        return f"CUDA out of memory with a batch of {samples}"

    def empty_cache(self) -> None:
        torch.cuda.empty_cache()

    def pad(self) -> None:
        pass

    def begin_step(self, samples: int, padded_pixels: int) -> float:
        return 0.0  # the peak is reset per step (start_timer), not per micro-batch

    def synchronize(self) -> None:
        """Wait for this rank's compute stream only: a side stream copying the next batch goes
        on."""
        with self.waits.waiting():
            torch.cuda.current_stream(self.torch_device).synchronize()

    def wait_event(self, event) -> None:
        """Wait for one recorded event alone (a side-stream batch's copy), counted with the
        device's waits."""
        with self.waits.waiting():
            event.synchronize()

    def reset_peak(self) -> None:
        self._window_peak = self._step_peak = 0
        torch.cuda.reset_peak_memory_stats(self.torch_device)


def ranks_per_gpu(local_ranks: int, gpus: int) -> int:
    """How many of the node's ranks share each GPU under --share-gpu (round-robin; the busiest
    GPU's)."""
    return max(1, -(-local_ranks // max(gpus, 1)))


def gpu_index(local_rank: int, share: bool = False) -> int:
    """The GPU this rank drives: its local rank when every local rank sees all the node's GPUs, or
    GPU 0 when the launcher bound one GPU per task (Slurm --gpus-per-task=1, CUDA_VISIBLE_DEVICES
    per rank); with `share` (--share-gpu) the ranks take the GPUs round-robin."""
    count = torch.cuda.device_count()
    if share:
        return local_rank % count
    if count == 1 or local_rank < count:
        return 0 if count == 1 else local_rank
    raise UsageError(f"local rank {local_rank} sees {count} GPUs (CUDA_VISIBLE_DEVICES="
                     f"{os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}): bind one GPU per task or all of them "
                     f"to every task (torchrun --nproc-per-node at most the GPU count), or pass --share-gpu to "
                     f"run several ranks on one GPU over gloo")


def nvml_index_of(cuda_index: int) -> int | None:
    """NVML's index of torch's CUDA device `cuda_index`, matched by UUID (NVML ignores
    CUDA_VISIBLE_DEVICES, so the CUDA index is not NVML's); None when NVML or the UUID is
    unavailable."""
    try:
        import pynvml

        pynvml.nvmlInit()
        uuid = uuid_text(torch.cuda.get_device_properties(cuda_index).uuid)
        for i in range(pynvml.nvmlDeviceGetCount()):
            if uuid_text(pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i))) == uuid:
                return i
    except Exception:  # noqa: BLE001 - no NVML: no utilisation telemetry, the figures say so
        return None
    return None
