"""Host memory of a rank and its DataLoader workers, sampled in a thread at a fixed interval.

PSS (proportional set size) counts a page shared by n processes as 1/n in each, so memory-mapped pages
shared between workers are not counted twice; RSS is kept beside it for comparison.
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


def tree_memory(pid: int) -> tuple[int, int]:
    """(pss, rss) of pid plus all its descendants."""
    pss = rss = 0
    for p in [pid, *descendants(pid)]:
        a, b = _read_rollup(p)
        pss += a
        rss += b
    return pss, rss


class MemorySampler:
    """Samples tree_memory(own pid) every `interval` seconds in a daemon thread; keeps the peaks."""

    supported = os.path.exists(f"/proc/{os.getpid()}/smaps_rollup")

    def __init__(self, interval: float = 0.2):
        self.interval = interval
        self.peak_pss = 0
        self.peak_rss = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self) -> None:
        pss, rss = tree_memory(os.getpid())
        self.peak_pss = max(self.peak_pss, pss)
        self.peak_rss = max(self.peak_rss, rss)
        self.samples += 1

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def __enter__(self) -> "MemorySampler":
        if self.supported:
            self._sample()
            self._thread = threading.Thread(target=self._loop, name="memory-sampler", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._sample()
