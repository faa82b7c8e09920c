"""harness.run.probe's figures for the machine check, timed by the thread's CPU clock (a probe the scheduler
interrupts is not counted slower for it), and the CPU figure through probe.jsonl and a baseline's merge."""
from __future__ import annotations

import itertools
import json

import pytest

from harness.results.baselinefile import Baseline, merge
from harness.results.probeline import ProbeLine, ProbeSeries
from harness.run import probe


def test_the_memory_copy_is_timed_by_the_threads_cpu_clock(monkeypatch):
    """Each copy takes 0.005 s of the thread's CPU; the wall clock jumps by seconds between readings (the copy
    descheduled): the figure is the CPU clock's, 1 MiB / 0.005 s."""
    cpu, wall = itertools.count(0, 0.005), itertools.count(0, 7.0)
    monkeypatch.setattr(probe.time, "thread_time", lambda: next(cpu))
    monkeypatch.setattr(probe.time, "perf_counter", lambda: next(wall))
    assert probe.memcpy_gb_s(nbytes=1 << 20, rounds=3) == pytest.approx((1 << 20) / 0.005 / 1e9)


def test_the_ideal_loader_reports_both_clocks(monkeypatch):
    """One loop, two figures: samples per wall second and per CPU second of this thread."""
    class Dataset:
        def __init__(self, *args, **kwargs):
            pass

        def __getitems__(self, batch):
            return batch

    monkeypatch.setattr(probe, "_pool", lambda spec, size: list(range(size)))
    monkeypatch.setattr(probe, "SampleDataset", Dataset)
    monkeypatch.setattr(probe, "collate", lambda items: items)
    wall = itertools.count(0, 0.1)  # 0.1 s a reading: 3 batches within 0.4 s, 0.5 s by the last reading
    cpu = itertools.count(0, 0.05)
    monkeypatch.setattr(probe.time, "perf_counter", lambda: next(wall))
    monkeypatch.setattr(probe.time, "thread_time", lambda: next(cpu))

    class Training:
        workload, image_size, decoder, batch_size = "pixels", 8, None, 10

    class Scenario:
        training, dataset = Training, None

    per_wall, per_cpu = probe.ideal_rates(Scenario)
    assert per_cpu > per_wall > 0
    assert per_cpu / per_wall == pytest.approx(0.5 / 0.05)  # wall 0.5 s, CPU 0.05 s, as the fake clocks ran


def test_the_cpu_figure_survives_probe_jsonl_and_a_merge():
    line = ProbeLine(0, 2000.0, 8.5, 2400.0)
    assert ProbeLine.from_json(json.loads(json.dumps(line.to_json()))) == line
    older = ProbeLine.from_json({"repeat": 1, "ideal_samples_per_s": 1.0, "memcpy_gb_s": 2.0})
    assert older.ideal_cpu_samples_per_s is None and "ideal_cpu_samples_per_s" not in older.to_json()
    assert ProbeSeries.from_lines([line]).ideal_cpu_samples_per_s == [2400.0]
    assert ProbeSeries.from_lines([line, older]).ideal_cpu_samples_per_s == []  # a repeat lacks it: none
    with_cpu = Baseline("ci", {}, {}, probe=ProbeSeries([1.0], [2.0], [3.0]))
    without = Baseline("ci", {}, {}, probe=ProbeSeries([1.0], [2.0]))
    assert merge([with_cpu, with_cpu]).probe.ideal_cpu_samples_per_s == [3.0, 3.0]
    assert merge([with_cpu, without]).probe.ideal_cpu_samples_per_s == []
    assert "ideal_cpu_samples_per_s" not in without.to_json()["probe"]
