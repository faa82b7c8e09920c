"""Telemetry sampled in a thread at a fixed interval during a cell, never per training step.

IntervalSampler is the thread. MemorySampler: host memory and disk reads of a rank and its
DataLoader workers. NvmlSampler: a real GPU's utilisation through NVML (nothing, cleanly, without
an NVIDIA driver).

PSS (proportional set size) counts a page shared by n processes as 1/n in each, so memory-mapped
pages shared between workers are not counted twice; RSS is kept beside it for comparison. Disk
reads come from /proc/<pid>/io read_bytes (bytes that really came from the block device, not from
the page cache), summed over the processes of the tree alive at the last sample: each since the
window's start, or since it started if it was born later. A process that exits is not counted
itself: the kernel adds its counters to the parent that reaps it (the rank, or the DataLoader's
forkserver), which is counted. Loader CPU time is counted the same way over the rank's descendants
only (DataLoader workers, their forkserver, a shared cache's server): user + system time from
/proc/<pid>/stat, including what reaped children spent (cutime + cstime), since the window's start.
"""
from __future__ import annotations

import os
import threading
from pathlib import Path


def _read_rollup(pid: int) -> tuple[int, int]:
    """(pss, rss) in bytes of one process, or (0, 0) when it is gone or unreadable."""
    pss = rss = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    pss = int(line.split()[1]) * 1024
                elif line.startswith("Rss:"):
                    rss = int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return pss, rss


def read_bytes(pid: int) -> int | None:
    """Bytes this process caused to be read from storage (/proc/<pid>/io read_bytes)."""
    try:
        with open(f"/proc/{pid}/io") as f:
            for line in f:
                if line.startswith("read_bytes:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def stat_fields(path: Path | str) -> list[str] | None:
    """The fields of a /proc/PID/stat (or /proc/PID/task/TID/stat) file after the command name,
    which may hold spaces and parentheses: [state, ppid, pgrp, ...] (stat(5) fields 3 on); None if
    it is gone."""
    try:
        return Path(path).read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def cpu_seconds(pid: int) -> float | None:
    """CPU seconds of a process and of the children it reaped (utime + stime + cutime + cstime)."""
    fields = stat_fields(f"/proc/{pid}/stat")
    try:
        return sum(int(v) for v in fields[11:15]) / CLOCK_TICKS  # fields 14-17 of stat(5)
    except (TypeError, ValueError):
        return None


def descendants(pid: int) -> list[int]:
    """All child processes of pid, recursively (DataLoader workers and their children)."""
    out: list[int] = []
    stack = [pid]
    while stack:
        p = stack.pop()
        for task in Path(f"/proc/{p}/task").glob("*/children"):
            try:
                kids = [int(k) for k in task.read_text().split()]
            except (OSError, ValueError):
                continue
            out.extend(kids)
            stack.extend(kids)
    return out


def tree_memory(pid: int, pids: list[int] | None = None) -> tuple[int, int]:
    """(pss, rss) of pid plus all its descendants (or of the given pids)."""
    pss = rss = 0
    for p in pids if pids is not None else [pid, *descendants(pid)]:
        a, b = _read_rollup(p)
        pss += a
        rss += b
    return pss, rss


class IntervalSampler:
    """Calls `_sample()` every `interval` seconds in a daemon thread, from `__enter__` to
    `__exit__` (once more at each end), never per training step. Subclasses say whether they can
    sample here."""

    def __init__(self, interval: float):
        self.interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _ready(self) -> bool:
        return True

    def _sample(self) -> None:
        raise NotImplementedError

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def __enter__(self):
        if self._ready():
            self._sample()
            self._thread = threading.Thread(target=self._loop, name=type(self).__name__, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._sample()


class MemorySampler(IntervalSampler):
    """Samples the process tree of this rank every `interval` seconds in a daemon thread.

    Keeps the peaks of PSS and RSS and the disk bytes read since `mark_window()` (or since start).
    """

    supported = os.path.exists(f"/proc/{os.getpid()}/smaps_rollup")

    def __init__(self, interval: float = 0.2):
        super().__init__(interval)
        self.peak_pss = 0
        self.peak_rss = 0
        self.samples = 0
        self._io_base: dict[int, int] = {}  # pid -> read_bytes when first seen / at window start
        self._io_last: dict[int, int] = {}
        self._cpu_base: dict[int, float] = {}  # descendant pid -> CPU seconds when first seen / at window start
        self._cpu_last: dict[int, float] = {}
        self._lock = threading.Lock()

    def _ready(self) -> bool:
        return self.supported

    def _sample(self) -> None:
        kids = descendants(os.getpid())
        pids = [os.getpid(), *kids]
        pss, rss = tree_memory(os.getpid(), pids)
        cpu = {p: c for p in kids if (c := cpu_seconds(p)) is not None}
        with self._lock:
            alive = {}
            for p in pids:
                n = read_bytes(p)
                if n is not None:
                    self._io_base.setdefault(p, n if self.samples == 0 else 0)
                    alive[p] = n
            self._io_last = alive
            for p, c in cpu.items():
                self._cpu_base.setdefault(p, c if self.samples == 0 else 0.0)
            self._cpu_last = cpu
            self.peak_pss = max(self.peak_pss, pss)
            self.peak_rss = max(self.peak_rss, rss)
            self.samples += 1

    def mark_window(self) -> None:
        """Start counting disk reads afresh, and the peaks too (warm-up excluded)."""
        if not self.supported:
            return
        self._sample()
        with self._lock:
            self._io_base = dict(self._io_last)
            self._cpu_base = dict(self._cpu_last)
            self.peak_pss = self.peak_rss = 0
        self._sample()

    @property
    def loader_cpu_s(self) -> float:
        """CPU seconds the rank's descendants (the loader's processes) spent since the window's
        start."""
        with self._lock:
            return sum(max(0.0, last - self._cpu_base.get(p, 0.0)) for p, last in self._cpu_last.items())

    @property
    def disk_read_bytes(self) -> int:
        with self._lock:
            return sum(max(0, last - self._io_base.get(p, 0)) for p, last in self._io_last.items())


class NvmlSampler(IntervalSampler):
    """Mean and peak `utilization.gpu` of one device, sampled every `interval` seconds (10 Hz or
    faster).

    Where there is no NVIDIA driver or library (or no device index) it samples nothing and
    `figures()` is None, so the tables show no NVML column."""

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
