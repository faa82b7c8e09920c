"""The harness's own cost per training step: the real loop's bookkeeping, against a 1 ms step.

The bar: per-step bookkeeping costs at most 1% of a 1 ms step (10 us). What is timed is
``MeasuredLoop.record_step`` of harness.train.measuredloop itself (cache statistics, the batching's feedback, the
step's figures into StepRecorder), driven with a stand-in device and batching that do nothing. Memory
sampling is not per step: it runs in its own thread every 0.2 s; its cost per sample is benchmarked
separately.
"""
from __future__ import annotations

import os

import pytest

from harness.measure.telemetry import MemorySampler, tree_memory
from harness.train.measuredloop import MeasuredLoop, StepTimes

STEPS = 1000


class IdleDevice:
    padded_s = 0.0
    last_bytes = 1.0
    capacity_bytes = 2.0

    def timed_compute_s(self) -> float:
        return 0.0


class Batching:
    splits_on_oom = False

    def observe(self, memory_fraction: float) -> None:
        pass


BATCH = {"padded_pixels": 819200, "real_pixels": 600000, "nbytes": 400000,
         "cache_stats": {"key": "pid1", "hits": 3, "misses": 1, "evictions": 0, "resident_bytes": 10}}


def thousand_steps() -> MeasuredLoop:
    loop = MeasuredLoop(IdleDevice(), None, None, None, Batching(), warmup_steps=0, window=STEPS)
    for i in range(STEPS):
        loop.record_step(BATCH, 32, True, StepTimes(i, i + 0.1, i + 0.2, i + 1.0, 0.05))
    return loop


@pytest.mark.benchmark(group="harness-overhead")
def test_per_step_bookkeeping(benchmark):
    loop = benchmark(thousand_steps)
    record = loop.recorder.as_record()
    assert loop.recorder.n == STEPS and len(record["step"]) == STEPS
    assert record["wait"][0] == pytest.approx(0.1) and record["step"][0] == pytest.approx(1.0)
    assert record["samples"] == 32 * STEPS and loop.window_end == STEPS
    if benchmark.stats is not None:  # timed run (not --benchmark-disable)
        per_step_us = benchmark.stats.stats.median / STEPS * 1e6
        print(f"\nbookkeeping per step: {per_step_us:.2f} us = {per_step_us / 1000 * 100:.3f}% of a 1 ms step")
        assert per_step_us < 10


@pytest.mark.benchmark(group="harness-overhead")
def test_memory_sample_of_the_process_tree(benchmark):
    pss, rss = benchmark(tree_memory, os.getpid())
    assert pss > 0 and rss >= pss
    assert MemorySampler().interval == 0.2  # in its own thread, five times a second, never per step
