"""The fidelity self-test, short form: the real loop measures a calibrated workload within tolerance."""
from __future__ import annotations

import pytest

from harness.commands import selftest
from harness.run.fidelity import REGIMES, Straggler


@pytest.mark.slow  # rank processes and DataLoader workers
def test_measured_figures_match_the_analytic_ones():
    rows = selftest.run(steps=16)
    assert {(r["regime"], r["figure"]) for r in rows} == {
        (regime.name, figure) for regime in REGIMES
        for figure in ("throughput", "stall_mean_pct", "au_pct")} | {
        ("straggler", figure) for figure in ("throughput", "stall_mean_pct", "peer_wait_pct", "au_pct")}
    bad = [r for r in rows if not r["ok"]]
    assert not bad, selftest.render(rows)
    starved = {r["figure"]: r for r in rows if r["regime"] == "starved"}
    assert abs(starved["stall_mean_pct"]["expected"] - 50.0) < 1e-9  # the analytic value itself


def test_expected_values_follow_the_formula():
    overlapped, starved = REGIMES
    e = starved.expected(batch_size=4, handoff_s=0.002)
    assert e["throughput"] == 4 / 0.2 and e["stall_mean_pct"] == 50.0 and e["au_pct"] == 50.0
    e = overlapped.expected(batch_size=4, handoff_s=0.002)
    assert abs(e["throughput"] - 4 / 0.102) < 1e-9 and abs(e["au_pct"] - 100 / 102 * 100) < 1e-9


def test_straggler_expectation_splits_the_wait_between_stall_and_peer_wait():
    s = Straggler(latency_s=(0.1, 0.3), workers=2, compute_s=0.1, batch_size=4)
    c = s.step_compute_s()
    assert 0.1 < c < 0.1002  # the known per-pixel term of 4 images of 32 x 32 is tiny
    e = s.expected(handoff_s=0.002)
    t = 0.15  # the straggler's loader: a batch every 300 ms / 2 workers
    assert e["throughput"] == 8 / t and abs(e["au_pct"] - c / t * 100) < 1e-9
    # the fast rank waits r for data then T - C - r for the straggler; the straggler waits T - C for data
    assert abs(e["stall_mean_pct"] + e["peer_wait_pct"] - (t - c) / t * 100) < 1e-9
    assert abs(e["peer_wait_pct"] - (t - c - 0.002) / (2 * t) * 100) < 1e-9

