"""The accelerator a rank trains on: a real CUDA device, or an emulated one.

The emulated device behaves like a GPU host. The rank runs a real step on the CPU (forward, backward with
DDP's real gradient allreduce over gloo, optimizer step) of a deliberately cheap stand-in model, so that its
host work is a small part of the modelled step, then sleeps until the modelled step time of the catalogue
entry has passed: the CPU is left to the DataLoader workers, as on a real GPU node. The step lasts
max(host work, modelled time); a step whose host work outlasts the model is an overrun, and that excess is
host overhead, never device time. The ranks agree before every step, so a rank whose data came late holds
up the others there, as a straggler does on real GPUs.

Both devices answer `timed_compute_s()`: the seconds the accelerator computed since `start_timer()`,
modelled on the emulated device, CUDA-event time on a GPU. That is the `device` part of a step.
"""
from __future__ import annotations

import time

import torch

from harness.accelerators import Accelerator


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

    @property
    def name(self) -> str:
        return f"{self.accelerator.name} (emulated)"

    @property
    def capacity_bytes(self) -> int:
        return self.accelerator.memory_bytes

    def fits(self, samples: int, padded_pixels: int) -> bool:
        return self.accelerator.memory_needed(self.workload, samples, padded_pixels) <= self.capacity_bytes

    def oom_message(self, samples: int, padded_pixels: int) -> str:
        need = self.accelerator.memory_needed(self.workload, samples, padded_pixels)
        return (f"emulated {self.accelerator.name}: a batch of {samples} needs {need / 1e9:.1f} GB of "
                f"{self.capacity_bytes / 1e9:.1f} GB")

    def empty_cache(self) -> None:
        pass

    def begin_step(self, samples: int, padded_pixels: int) -> float:
        """Model the step: raise OutOfMemoryError as a real GPU would; return the modelled seconds."""
        if not self.fits(samples, padded_pixels):
            raise torch.OutOfMemoryError(self.oom_message(samples, padded_pixels))
        need = self.accelerator.memory_needed(self.workload, samples, padded_pixels)
        self.last_bytes = need
        self.peak_bytes = max(self.peak_bytes, need)
        modelled = self.accelerator.step_seconds(self.workload, samples, padded_pixels)
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
        self.pad()  # the end of the step: wait out the rest of the modelled time

    nvml_index = None  # no NVML telemetry for an emulated device

    def start_timer(self) -> None:
        self._busy_s = 0.0

    def timed_compute_s(self) -> float:
        """Modelled device seconds of the micro-batches begun since start_timer()."""
        return self._busy_s

    def reset_peak(self) -> None:
        self.peak_bytes = 0
        self.overruns = 0


class CudaDevice:
    """A real GPU: compute timed with CUDA events, memory from the caching allocator's peak."""

    emulated = False

    def __init__(self, local_rank: int):
        torch.cuda.set_device(local_rank)
        self.torch_device = torch.device("cuda", local_rank)
        self.nvml_index = local_rank
        self.overruns = 0
        self.padded_s = 0.0
        self._window_peak = 0
        self._start = torch.cuda.Event(enable_timing=True)
        self._end = torch.cuda.Event(enable_timing=True)

    def start_timer(self) -> None:
        self._start.record()

    def timed_compute_s(self) -> float:
        """GPU time between start_timer() and now (synchronises with the device)."""
        self._end.record()
        self._end.synchronize()
        return self._start.elapsed_time(self._end) / 1e3

    @property
    def name(self) -> str:
        return torch.cuda.get_device_name(self.torch_device)

    @property
    def last_bytes(self) -> int:
        """Peak bytes allocated during the current (or last) step: the allocator's peak is reset per step."""
        return torch.cuda.max_memory_allocated(self.torch_device)

    @property
    def peak_bytes(self) -> int:
        return max(self._window_peak, self.last_bytes)

    @property
    def capacity_bytes(self) -> int:
        return torch.cuda.get_device_properties(self.torch_device).total_memory

    def fits(self, samples: int, padded_pixels: int) -> bool:
        return True  # a real GPU tells by raising OutOfMemoryError

    def oom_message(self, samples: int, padded_pixels: int) -> str:
        return f"CUDA out of memory with a batch of {samples}"

    def empty_cache(self) -> None:
        torch.cuda.empty_cache()

    def pad(self) -> None:
        pass

    def begin_step(self, samples: int, padded_pixels: int) -> float:
        self._window_peak = self.peak_bytes
        torch.cuda.reset_peak_memory_stats(self.torch_device)
        return 0.0

    def synchronize(self) -> None:
        torch.cuda.synchronize(self.torch_device)

    def reset_peak(self) -> None:
        self._window_peak = 0
        torch.cuda.reset_peak_memory_stats(self.torch_device)
