"""The gate's figures (harness.results.metrics.against_reference, harness.measure.reference): each a CPU cost over
work timed in the same visit, so that the machine's load cancels in it while a change of the code it watches
moves it; a real rank records its reference readings; a baseline keeps the figures; the baseline gate judges each
at its own minimum effect, one line per figure, where the loader + rank CPU figure calls load a regression."""
from __future__ import annotations

import json
import time

import pytest
from test_rank_cpu import SpinningDevice, measured_loop, run_loop

from harness.gates import baseline as baseline_gate
from harness.gates import table
from harness.measure import reference
from harness.measure.rankrecord import STAGES, RankRecord
from harness.results import metrics
from harness.results.baselinefile import Baseline, BaselineCell
from harness.train import measuredloop

# a loader's CPU seconds per sample by stage, the rank's per sample, and the two references (s per piece)
STAGE_S = {"read": 20e-6, "cache": 0.0, "decode": 180e-6, "transform": 15e-6, "collate": 20e-6, "send": 10e-6,
           "queue": 5e-6, "receive": 30e-6}
RANK_S, OTHER_S, REF_DECODE_S, REF_RANK_S = 200e-6, 100e-6, 700e-6, 450e-6  # OTHER_S: the rank's other threads
SAMPLES = 192


def records(load: float = 1.0, stage: dict | None = None, rank: float = 1.0, ranks: int = 2) -> list[RankRecord]:
    """The ranks of one visit: every CPU time x `load` (what the machine's load of that minute does to every
    instruction, the references' too); `stage` and `rank` multiply the code's own cost (a planted change)."""
    out = []
    for r in range(ranks):
        s = {k: load * v * (stage or {}).get(k, 1.0) * SAMPLES for k, v in STAGE_S.items()}
        out.append(RankRecord(rank=r, step=[0.01] * 12, samples=SAMPLES, workers=1,
                              stages={"s": s, "samples": SAMPLES, "batches": 12, "processes": 1},
                              rank_cpu_s=load * rank * (RANK_S + OTHER_S) * SAMPLES,
                              rank_main_cpu_s=load * rank * RANK_S * SAMPLES,
                              reference={"decode_s": load * REF_DECODE_S, "rank_s": load * REF_RANK_S,
                                         "readings": 2, "version": reference.REFERENCE_VERSION}))
    return out


def test_each_figure_is_its_cost_over_its_reference():
    f = metrics.against_reference(records())
    loader = sum(v for k, v in STAGE_S.items() if k != "receive")
    assert f["loader_vs_decode"] == pytest.approx(loader / STAGE_S["decode"])
    assert f["decode_vs_reference"] == pytest.approx(STAGE_S["decode"] / REF_DECODE_S)
    assert f["rank_vs_reference"] == pytest.approx(RANK_S / REF_RANK_S)


@pytest.mark.parametrize("load", [0.7, 1.4, 2.0])
def test_the_load_cancels_in_every_figure(load):
    """What a busy minute does to every instruction (x0.7 .. x2.0 here; the loader + rank CPU moved -39% ..
    +42% between same-code runs on the shared 2-core machine) leaves each figure as it was."""
    quiet, busy = metrics.against_reference(records()), metrics.against_reference(records(load))
    assert busy.keys() == quiet.keys() == set(baseline_gate.FIGURES)
    for key in quiet:
        assert busy[key] == pytest.approx(quiet[key], rel=1e-9), key


def test_each_figure_sees_its_own_code():
    """A slower collate moves the loader figure; a slower decode the decode figure (the loader figure, whose
    denominator decode is, falls: it cannot see decode); a dearer rank step the rank figure, and nothing else."""
    base = metrics.against_reference(records())
    collate = metrics.against_reference(records(stage={"collate": 3.0}))
    decode = metrics.against_reference(records(stage={"decode": 1.25}))
    rank = metrics.against_reference(records(rank=1.25))
    assert collate["loader_vs_decode"] / base["loader_vs_decode"] == pytest.approx(1 + 40e-6 / 250e-6)
    assert collate["decode_vs_reference"] == pytest.approx(base["decode_vs_reference"])
    assert decode["decode_vs_reference"] / base["decode_vs_reference"] == pytest.approx(1.25)
    assert decode["loader_vs_decode"] < base["loader_vs_decode"]
    assert rank["rank_vs_reference"] / base["rank_vs_reference"] == pytest.approx(1.25)
    assert {k: rank[k] for k in ("loader_vs_decode", "decode_vs_reference")} == \
        {k: base[k] for k in ("loader_vs_decode", "decode_vs_reference")}


def test_the_rank_figure_is_its_main_thread_and_without_workers_less_the_wait():
    """The rank's other threads (receiving ahead, telemetry) are not in it; with workers = 0 the main thread
    loads the batches in its wait: that is the loader's, not the rank's."""
    recs = records()
    for r in recs:
        r.rank_cpu_s *= 3  # the other threads busier: the figure does not move
    assert metrics.against_reference(recs)["rank_vs_reference"] == pytest.approx(RANK_S / REF_RANK_S)
    inline = records()
    for r in inline:
        r.workers, r.wait = 0, [0.001] * 12
        r.rank_main_cpu_s += 0.012  # the loading it did in its wait
    assert metrics.against_reference(inline)["rank_vs_reference"] == pytest.approx(RANK_S / REF_RANK_S)


def test_a_figure_is_left_out_where_its_parts_were_not_measured():
    older = records()
    older[1].reference = None  # one rank without a reading (an older line): no reference figure at all
    assert set(metrics.against_reference(older)) == {"loader_vs_decode"}
    older = records()
    older[0].rank_main_cpu_s = None
    assert "rank_vs_reference" not in metrics.against_reference(older)
    features = records()
    for r in features:  # the features workload decodes nothing
        r.stages["s"]["decode"] = 0.0
    assert set(metrics.against_reference(features)) == {"rank_vs_reference"}


def test_the_reference_is_fixed_work_on_the_thread_clock():
    """The fixed JPEG is the same bytes every time; a reading is positive thread CPU of both pieces."""
    assert reference.reference_jpeg() == reference.reference_jpeg.__wrapped__()
    assert reference.decode_once(reference.reference_jpeg()).shape == (72, 96, 3)
    reading = reference.measure()
    assert set(reading) == {"decode_s", "rank_s"} and min(reading.values()) > 0
    both = reference.combine([{"decode_s": 1.0, "rank_s": 2.0}, {"decode_s": 3.0, "rank_s": 4.0}])
    assert both == {"decode_s": 2.0, "rank_s": 3.0, "readings": 2, "version": reference.REFERENCE_VERSION}
    assert reference.combine([]) is None


SPIN_S = 0.3  # a reading's CPU in the test: more than the 3-step window's own


def test_a_real_loop_reads_the_reference_outside_its_window(monkeypatch):
    """A real MeasuredLoop takes two readings, both after its window's clocks are read (none before the window:
    a pause there lets the loader run ahead into it), so the rank's CPU over the window holds neither."""
    taken = []

    def reading():
        taken.append(loop.step)  # the steps taken by then
        start = time.thread_time()
        while time.thread_time() - start < SPIN_S:  # the reference's CPU: in no figure of the window
            pass
        return {"decode_s": 0.001, "rank_s": 0.002}
    monkeypatch.setattr(measuredloop.reference, "measure", reading)
    loop = measured_loop(SpinningDevice(sleeps=True), monkeypatch, warmup=1, window=3)
    record = run_loop(loop)
    assert taken == [4, 4]  # 1 warm-up step and the 3 of the window: after the window
    assert record.reference == {"decode_s": 0.001, "rank_s": 0.002, "readings": 2,
                                "version": reference.REFERENCE_VERSION}
    assert RankRecord.from_json(json.loads(json.dumps(record.to_json()))).reference == record.reference
    assert 0 < record.rank_main_cpu_s <= record.rank_cpu_s + 0.01  # the main thread's part of the process's
    assert record.rank_cpu_s < SPIN_S and record.rank_main_cpu_s < SPIN_S  # neither reading is in the window


def baseline(loads: list[float], **plant) -> Baseline:
    """One cell, a repeat per load: its loader + rank CPU per sample and the gate's figures, as a run gives."""
    cell = BaselineCell(params={})
    for load in loads:
        recs = records(load, **plant)
        f = metrics.against_reference(recs)
        loader = sum(v for r in recs for k, v in r.stages["s"].items() if k != "receive")
        cell.cpu_s_per_sample.append((loader + sum(r.rank_cpu_s for r in recs)) / sum(r.samples for r in recs))
        for key in baseline_gate.FIGURES:
            cell.samples(key).append(f[key] * (1 + 0.002 * len(cell.samples(key))))  # a little noise
    return Baseline("ci", {"world_size": 2}, {"storage=raw": cell})


QUIET, BUSY = [1.0, 0.98, 1.02, 1.01, 0.99], [1.35, 1.4, 1.3, 1.45, 1.38]


def test_the_gate_on_the_figures_does_not_call_load_a_regression():
    """The same code, the baseline quiet and this run beside a hog (x1.3 .. x1.45 CPU per instruction): the loader
    + rank CPU calls it slower (exit 1); each of the gate's figures, unchanged (exit 0), one line each."""
    quiet, busy = baseline(QUIET), baseline(BUSY)
    assert baseline_gate.judge(busy, quiet, metric="cpu", min_effect=0.15, same_machine=True).exit_code == 1
    verdict = baseline_gate.judge(busy, quiet, metric="figures", same_machine=True)
    assert verdict.exit_code == 0 and [c.metric for c in verdict.comparisons] == list(baseline_gate.FIGURES)
    assert [c.min_effect for c in verdict.comparisons] == list(baseline_gate.FIGURES.values())
    text = table.render_verdict(verdict)
    lines = text.split("Verdict, one line per figure:\n")[1].splitlines()
    assert len(lines) == 3 and all(line.startswith("- passed: 0 slower, 0 faster, 1 unchanged") for line in lines)


@pytest.mark.parametrize("plant, figure", [({"stage": {"collate": 3.0, "send": 3.0}}, "loader_vs_decode"),
                                           ({"stage": {"decode": 1.25}}, "decode_vs_reference"),
                                           ({"rank": 1.25}, "rank_vs_reference")])
def test_a_planted_change_fails_its_figure_under_load(plant, figure):
    """A change of the code a figure watches, measured under load against a quiet baseline: that figure is
    slower (exit 1), and its line says FAILED."""
    verdict = baseline_gate.judge(baseline(BUSY, **plant), baseline(QUIET), metric="figures", same_machine=True)
    failed = [c.metric for c in verdict.comparisons if c.exit_code]
    assert verdict.exit_code == 1 and failed == [figure]
    assert f"- FAILED: 1 slower, 0 faster, 0 unchanged (metric: {baseline_gate.METRIC_NAMES[figure]}" in \
        table.render_verdict(verdict)


def test_a_baseline_keeps_the_figures_and_an_older_one_warns():
    b = baseline(QUIET)
    again = Baseline.from_json(json.loads(json.dumps(b.to_json())))
    assert again.cells["storage=raw"].rank_vs_reference == b.cells["storage=raw"].rank_vs_reference
    old = Baseline.from_json({**b.to_json(), "cells": {"storage=raw": {
        k: v for k, v in b.to_json()["cells"]["storage=raw"].items() if k not in baseline_gate.FIGURES}}})
    assert "rank_vs_reference" not in old.to_json()["cells"]["storage=raw"]
    verdict = baseline_gate.judge(b, old, metric="figures", same_machine=True)
    assert verdict.exit_code == 0 and {r.verdict for c in verdict.comparisons for r in c.rows} == {"new"}
    assert any("the baseline records no rank: main thread CPU / reference step" in w for w in verdict.warnings)


def test_every_stage_is_in_the_loader_figure_but_receive():
    """The loader figure sums the stages a loader runs (receive runs in the rank: its CPU is the rank's)."""
    more = metrics.against_reference(records(stage={"receive": 5.0}))
    assert more["loader_vs_decode"] == pytest.approx(metrics.against_reference(records())["loader_vs_decode"])
    assert set(STAGE_S) == set(STAGES)
