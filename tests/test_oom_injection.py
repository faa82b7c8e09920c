"""An OOM injected on rank 1 of a 2-rank DDP run (gloo, CPU) in forward, backward (part-way through the
bucketed allreduce) or the optimizer step, on a model with and without BatchNorm buffers: no hang, no crash,
the same steps on every rank; with splitting on a forward or backward OOM is absorbed (one step raised,
replicas identical), every other case stops every rank at the same step (harness.train.ddpstep). The
injection is harness.checks.oom.inject; harness.checks.oom.command prints its verdicts."""
from __future__ import annotations

import pytest

from harness.checks.oom import command as oomcheck
from harness.checks.oom import inject as oominject
from harness.checks.oom.inject import Case
from harness.errors import UsageError

CASES = [Case(m, phase, split) for m in oominject.MODELS for phase in oominject.PHASES for split in (True, False)]


@pytest.fixture(scope="module")
def outcomes():
    return dict(zip(CASES, oominject.run(CASES, timeout_s=30)))


def test_every_case_is_run_by_the_command():
    assert oominject.all_cases() == CASES
    assert oominject.all_cases(("batchnorm",)) == [c for c in CASES if c.model == "batchnorm"]


def test_an_unknown_model_is_one_line():
    with pytest.raises(UsageError, match="no model resnet; choose from two-tower, batchnorm"):
        oomcheck.main(oomcheck.Request(models=("resnet",)))


@pytest.mark.slow  # spawns two rank processes
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.label)
def test_each_case_ends_as_the_policy_says(outcomes, case):
    ranks = outcomes[case]
    assert ranks is not None, "a hang or a crash"
    r0, r1 = ranks
    assert r0["steps"] == r1["steps"]
    if case.goes_on:
        assert r0["steps"] == oominject.WARMUP + oominject.WINDOW
        assert (r0["raised"], r1["raised"]) == (0, 1)  # one step raised, on rank 1
        # the device remembers the OOM (as CUDA's does): later steps split ahead, which raised nothing and
        # are no OOM events (harness.train.ddpstep counts only steps that raised)
        assert r0["oom_events"] == 0 and r1["oom_events"] == 1
        assert r0["error"] is None and r1["error"] is None
        assert r0["digest"] == r1["digest"]  # DDP's reducer stayed in step: the replicas are identical
    else:
        assert r0["steps"] < oominject.WARMUP + oominject.WINDOW
        assert r1["error"].startswith(f"OOM in the {case.phase}: ") and "injected" in r1["error"]
        assert r0["error"].startswith("stopped with another rank")
    assert oominject.holds(case, ranks)


def test_each_case_gets_a_device_that_remembers_ooms_as_cuda_does():
    """The injected run's device has CudaDevice's memory of OOMs, and each case a fresh one: one device for
    all 12 cases (as before) made 10 of them fail once note_oom remembers (a case after the first OOM split
    every batch ahead, or stopped at step 1 on a foreseen OOM; BatchNorm cases split down to one sample)."""
    device = oominject.case_device(real=False)
    assert device.fits(8, 0)
    device.note_oom(8, 0)
    assert device.raised_ooms == 1 and not device.fits(8, 0) and device.fits(4, 0)
    fresh = oominject.case_device(real=False)
    assert fresh.fits(8, 0) and fresh.raised_ooms == 0


def test_the_check_fails_a_case_that_did_not_stop():
    ranks = [{"steps": 7, "oom_events": 0, "raised": 0, "error": None, "digest": "a"},
             {"steps": 7, "oom_events": 0, "raised": 0, "error": None, "digest": "a"}]
    assert not oominject.holds(Case("batchnorm", "backward", False), ranks)
    assert not oominject.holds(Case("batchnorm", "backward", True), ranks)  # no OOM event counted
