"""What a rank records while it trains one cell: per-step timings and the cache statistics of its
workers."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from harness.measure.rankrecord import PART_NAMES, RankCache


class StepRecorder:
    """Per-step figures of the measured window in preallocated arrays.

    A rank's wall time is accounted once, per step, into five parts that sum to the step: wait
    (blocked getting the batch), h2d (host-to-device copy), peer_wait (the rank agreement, where a
    fast rank waits for a slow one), device (the accelerator computing: modelled on an emulated
    device, CUDA-event time on a GPU) and overhead (the rest of the host's time: work beyond the
    device time and the per-step bookkeeping). `padded` is the part of `device` the emulated device
    slept through; `cost` the summed sampler cost of the batch (what the balanced sampler
    balances); `launch` (where a step gives it) the host's own time from the agreement's end to the
    step's last launch.
    """

    PARTS = PART_NAMES  # harness.measure.rankrecord.PARTS
    TIMES = PARTS + ("padded",)
    COUNTS = ("samples", "padded_pixels", "real_pixels", "nbytes")

    def __init__(self, steps: int):
        self.arrays = {name: np.zeros(steps, dtype=np.float64)
                       for name in self.TIMES + self.COUNTS + ("cost", "launch")}
        self.n = 0

    def add(self, **values: float) -> None:
        for name, value in values.items():
            self.arrays[name][self.n] = value
        self.n += 1

    def add_to_last(self, name: str, value: float) -> None:
        """Add to the last recorded step (its bookkeeping, timed after the step was added)."""
        if self.n:
            self.arrays[name][self.n - 1] += value

    def as_record(self) -> dict:
        """The per-step lists and the window's counts: fields of a
        harness.measure.rankrecord.RankRecord."""
        a = {k: v[: self.n] for k, v in self.arrays.items()}
        rec = {k: np.round(a[k], 6).tolist() for k in self.TIMES}
        rec["step"] = np.round(sum(a[k] for k in self.PARTS), 6).tolist()
        rec["cost"] = np.round(a["cost"], 3).tolist()
        if a["launch"].any():  # recorded (a step gave `launch`): the harness's own host time per step
            rec["launch"] = np.round(a["launch"], 6).tolist()
        rec["batch_sizes"] = a["samples"].astype(int).tolist()
        for k in self.COUNTS:
            rec[k] = int(a[k].sum())
        return rec


@dataclass
class CacheTally:
    """Latest cache statistics per reading process; totals at the window's start are subtracted.

    Worker-scope caches report with each batch (update); a shared cache is asked directly
    (shared_stats) at the window's start and end."""

    shared_stats: Callable[[], dict | None] | None = None
    latest: dict[str, dict] = field(default_factory=dict)
    at_window_start: dict[str, float] = field(default_factory=dict)

    def _refresh_shared(self) -> None:
        if self.shared_stats is not None:
            self.update(self.shared_stats())

    def update(self, stats: dict | None) -> None:
        if stats:
            self.latest[stats["key"]] = stats

    def totals(self) -> dict[str, float]:
        keys = ("hits", "misses", "evictions", "resident_bytes")
        return {k: float(sum(s.get(k, 0) for s in self.latest.values())) for k in keys}

    def mark_window(self) -> None:
        self._refresh_shared()
        self.at_window_start = self.totals()

    def record(self) -> RankCache | None:
        self._refresh_shared()
        if not self.latest:
            return None
        end = self.totals()
        window = {k: end[k] - self.at_window_start.get(k, 0.0) for k in ("hits", "misses", "evictions")}
        scope = next(iter(self.latest.values())).get("scope")
        return RankCache(**window, resident_bytes=end["resident_bytes"], processes=len(self.latest), scope=scope)
