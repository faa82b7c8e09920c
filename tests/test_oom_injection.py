"""An OOM injected on rank 1 of a 2-rank DDP run (gloo, CPU): no hang, no crash, the same steps on every
rank; split on -> the run goes on (one OOM event, replicas identical), split off -> every rank stops."""
from __future__ import annotations

import pytest

from harness.commands import oomcheck

pytestmark = pytest.mark.slow  # spawns two rank processes


def test_split_on_the_run_continues_with_equal_steps_on_every_rank():
    r0, r1 = oomcheck.run(split=True, timeout_s=120)
    assert r0["steps"] == r1["steps"] == oomcheck.WARMUP + oomcheck.WINDOW
    assert (r0["oom_events"], r1["oom_events"]) == (0, 1)
    assert r0["error"] is None and r1["error"] is None
    assert r0["digest"] == r1["digest"]  # DDP's reducer stayed in step: the replicas are identical


def test_split_off_every_rank_stops_at_the_same_step():
    r0, r1 = oomcheck.run(split=False, timeout_s=120)
    assert r0["steps"] == r1["steps"] < oomcheck.WARMUP + oomcheck.WINDOW
    assert r1["error"].startswith("OOM: injected") and r0["error"].startswith("OOM")
