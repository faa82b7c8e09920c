"""The ranks' wait (harness.analysis.rankwait): the expected maximum against brute force, what a 2-rank
calibration's records give, the laws carried to N, the epoch starts a real loop records, and check-capacity's
verdict with and without the term (without it the model says a host feeds 2 where it feeds 1)."""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np
import pytest
from test_rank_cpu import SpinningDevice, batches, measured_loop, run_loop

from harness.analysis import rankwait
from harness.analysis.checkcases import CheckCase
from harness.analysis.targetmodel import Costs
from harness.checks.predictions import capacity as check_capacity
from harness.config import scenario as scenario_mod
from harness.measure.rankrecord import RankRecord
from harness.train.batches import InMemoryBatches


@dataclass
class Record:
    """The parts of a rank record the ranks' wait reads."""

    step: list[float]
    peer_wait: list[float]
    device: list[float]
    samples: int = 0
    rank_cpu_s: float = 0.0
    epoch_starts: list[int] | None = field(default=None)


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_the_expected_maximum_is_exact_for_the_empirical_distribution(n):
    values = [0.5, 1.0, 1.0, 3.0, 7.0]
    brute = np.mean([max(draw) for draw in itertools.product(values, repeat=n)])
    assert rankwait.expected_max(values, n) == pytest.approx(brute, rel=1e-12)
    assert rankwait.expected_max(values, 1) == pytest.approx(np.mean(values))


def test_a_calibration_gives_the_busy_times_the_agreement_and_the_epoch_start():
    """Two ranks, 6 steps: step 3 began an epoch (a 50 ms wait on rank 1); the last to arrive waits 2 ms."""
    step0 = [0.020, 0.021, 0.020, 0.070, 0.020, 0.022]
    peer0 = [0.002, 0.003, 0.002, 0.052, 0.002, 0.002]
    step1 = [0.020, 0.021, 0.020, 0.070, 0.020, 0.022]
    peer1 = [0.004, 0.002, 0.003, 0.002, 0.005, 0.003]
    device = [0.015] * 6
    records = [Record(step0, peer0, device, 96, 0.030, [3]), Record(step1, peer1, device, 96, 0.034, [3])]
    wait = rankwait.measure(records, one_rank_rank_s=0.0003)
    plain = [s - p for r in (zip(step0, peer0), zip(step1, peer1)) for i, (s, p) in enumerate(r) if i != 3]
    assert wait.ranks == 2 and wait.restarts == 1
    assert wait.busy_s == pytest.approx(sorted(plain))  # the epoch's step left out
    assert wait.latency_s == pytest.approx(0.002)  # the least peer wait of each step
    assert wait.restart_s == pytest.approx(0.068 - np.median(plain))
    assert wait.cpu_s == pytest.approx(0.064 / 192 - 0.0003)
    no_marks = rankwait.measure([Record(step0, peer0, device, 96, 0.03), Record(step1, peer1, device, 96, 0.03)],
                                0.0003)
    assert no_marks.restarts == 0 and no_marks.restart_s == 0 and len(no_marks.busy_s) == 12
    assert rankwait.measure(records[:1], 0.0003) is None


def test_the_laws_carry_the_wait_to_n_ranks():
    wait = rankwait.RankWait(ranks=2, busy_s=(0.016, 0.017, 0.018, 0.021), device_s=0.0155, latency_s=0.002,
                             restart_s=0.032, restarts=1, cpu_s=0.0001)
    assert rankwait.rank_cpu_s(0.0003, wait, 1) == 0.0003
    assert rankwait.rank_cpu_s(0.0003, wait, 2) == pytest.approx(0.0004)
    assert rankwait.rank_cpu_s(0.0003, wait, 4) == pytest.approx(0.0003 + 0.0001 * 3)  # 2 (4-1) of 2 (2-1) messages
    step4 = rankwait.step_seconds(wait, 4, 32, 2048)
    assert step4 == pytest.approx(rankwait.expected_max(wait.busy_s, 4) + 0.002 + 0.032 * 4 * 32 / 2048)
    assert rankwait.step_seconds(wait, 4, 32, 2048) > rankwait.step_seconds(wait, 2, 32, 2048)
    assert rankwait.au_pct(wait, 2, 32, 2048) == pytest.approx(100 * 0.0155 / rankwait.step_seconds(wait, 2, 32, 2048))


def test_a_record_keeps_its_epoch_starts_and_an_old_one_reads_without():
    line = RankRecord(step=[0.1, 0.2], epoch_starts=[1]).to_json()
    assert RankRecord.from_json(line).epoch_starts == [1]
    old = {k: v for k, v in line.items() if k != "epoch_starts"}
    assert RankRecord.from_json(old).epoch_starts is None


class Epochs(InMemoryBatches):
    """The batches as epochs: next() runs dry after each pass, as a loader's iterator does."""

    def next(self) -> dict | None:
        if self.i == len(self.batches):
            return None
        self.i += 1
        return self.batches[self.i - 1]

    def new_epoch(self) -> None:
        self.i, self.completed_epochs = 0, self.completed_epochs + 1


def test_the_real_loop_marks_the_steps_that_began_an_epoch(monkeypatch):
    """4 batches an epoch, 1 warm-up step, 8 measured: epochs begin at the window's steps 3 and 7."""
    record = run_loop(measured_loop(SpinningDevice(sleeps=True), monkeypatch, Epochs(batches()), 1, 8))
    assert record.epoch_starts == [3, 7] and record.steps == 8


def capacity_model(wait: rankwait.RankWait | None):
    sc = scenario_mod.load("capacity")
    calib = Costs(workload="features", loader_s=0.000102, rank_s=0.000252, receive_ahead_s=0.000052)
    return sc, check_capacity.Model(calib, wait, 2000)


def test_the_capacity_check_fails_without_the_ranks_wait():
    """The features workload as measured on the 2-core host (AU 92.5, 78.0, 45.8 at 1, 2, 4 ranks) and its
    2-rank calibration's wait: with the term the 2- and 4-rank AUs are within the noise; without it the
    model says 2 fed, and the check fails."""
    busy = tuple(np.linspace(0.0162, 0.0185, 60))
    wait = rankwait.RankWait(ranks=2, busy_s=busy, device_s=0.0155, latency_s=0.0020, restart_s=0.022,
                             restarts=1, cpu_s=0.000085)
    measured = [92.5, 78.0, 45.8]

    def rows(model_wait):
        sc, model = capacity_model(model_wait)
        base = CheckCase("calibration", 1, 1, sc.training.batch_size, sc.training.image_size, "raw", "pil")
        out = []
        for ws, au in zip(check_capacity.SIZES, measured):
            p = model.predict(base, CheckCase(f"x{ws}", ws, 1, base.batch_size, base.image_size), sc, 2)
            out.append({"workload": "features", "world_size": ws, "predicted_au_pct": p.au_pct,
                        "measured_au_pct": au, "other_cpu_pct": 0.5})
        return out

    def sized(model_wait):  # repeats 2.5 points apart: the noise the check accepts at most
        out = rows(model_wait)
        for row in out[:2]:
            row["calibration_au_pct"] = row["measured_au_pct"] + 2.5 * 2 ** 0.5
        return out

    assert [r["world_size"] for r in check_capacity.misses(sized(wait), 2.5)] in ([], [1])  # 1: the device's
    line, state = check_capacity.verdict(sized(None))
    assert state == check_capacity.DISAGREE and "predicted 2, measured undecided: DISAGREE" in line
    assert "at 2 rank(s) AU 100.0 predicted, 78.0 measured" in line
