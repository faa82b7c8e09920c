"""Real-GPU telemetry: NVML utilisation sampled in a thread (10 Hz or faster) during the measured window.

Everything here is skipped cleanly where there is no NVIDIA driver (NVML missing): the sampler then reports
nothing and the tables show no NVML column.
"""
from __future__ import annotations

import threading


class NvmlSampler:
    """Mean and peak `utilization.gpu` of one device, sampled every `interval` seconds in a daemon thread."""

    def __init__(self, device_index: int | None, interval: float = 0.05):
        self.device_index = device_index
        self.interval = interval
        self.samples: list[int] = []
        self._window_start = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
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

    def _loop(self) -> None:
        import pynvml

        while not self._stop.wait(self.interval):
            try:
                self.samples.append(int(pynvml.nvmlDeviceGetUtilizationRates(self._handle).gpu))
            except Exception:
                return

    def mark_window(self) -> None:
        self._window_start = len(self.samples)

    def figures(self) -> dict | None:
        window = self.samples[self._window_start:]
        if not window:
            return None
        return {"nvml_util_mean_pct": sum(window) / len(window), "nvml_util_max_pct": max(window),
                "nvml_samples": len(window), "nvml_interval_s": self.interval}

    def __enter__(self) -> "NvmlSampler":
        self._handle = self._open()
        if self._handle is not None:
            self._thread = threading.Thread(target=self._loop, name="nvml-sampler", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
