"""Real-GPU telemetry: NVML utilisation sampled in a thread (10 Hz or faster) during the measured window.

Everything here is skipped cleanly where there is no NVIDIA driver (NVML missing): the sampler then reports
nothing and the tables show no NVML column.
"""
from __future__ import annotations

from harness.memory import IntervalSampler


class NvmlSampler(IntervalSampler):
    """Mean and peak `utilization.gpu` of one device, sampled every `interval` seconds in a daemon thread."""

    def __init__(self, device_index: int | None, interval: float = 0.05):
        super().__init__(interval)
        self.device_index = device_index
        self.samples: list[int] = []
        self._window_start = 0
        self._handle = None

    def _open(self):
        if self.device_index is None:
            return None
        try:
            import pynvml

            pynvml.nvmlInit()
            return pynvml.nvmlDeviceGetHandleByIndex(self.device_index)
        except Exception:  # no driver, no library, no such device: no telemetry
            return None

    def _ready(self) -> bool:
        self._handle = self._open()
        return self._handle is not None

    def _sample(self) -> None:
        import pynvml

        try:
            self.samples.append(int(pynvml.nvmlDeviceGetUtilizationRates(self._handle).gpu))
        except Exception:  # the device went away: stop sampling
            self._stop.set()

    def __exit__(self, *exc) -> None:
        super().__exit__(*exc)
        if self._handle is not None:
            import pynvml

            pynvml.nvmlShutdown()

    def mark_window(self) -> None:
        self._window_start = len(self.samples)

    def figures(self) -> dict | None:
        window = self.samples[self._window_start:]
        if not window:
            return None
        return {"nvml_util_mean_pct": sum(window) / len(window), "nvml_util_max_pct": max(window),
                "nvml_samples": len(window), "nvml_interval_s": self.interval}
