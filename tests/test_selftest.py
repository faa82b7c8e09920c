"""The fidelity self-test, short form: the real loop measures a calibrated workload within tolerance."""
from __future__ import annotations

import pytest

from harness import selftest


@pytest.mark.slow  # rank processes and DataLoader workers
def test_measured_figures_match_the_analytic_ones():
    rows = selftest.run(steps=16)
    assert {(r["regime"], r["figure"]) for r in rows} == {
        (regime.name, figure) for regime in selftest.REGIMES
        for figure in ("throughput", "stall_mean_pct", "au_pct")}
    bad = [r for r in rows if not r["ok"]]
    assert not bad, selftest.render(rows)
    starved = {r["figure"]: r for r in rows if r["regime"] == "starved"}
    assert abs(starved["stall_mean_pct"]["expected"] - 50.0) < 1e-9  # the analytic value itself


def test_expected_values_follow_the_formula():
    overlapped, starved = selftest.REGIMES
    e = starved.expected(batch_size=4, handoff_s=0.002)
    assert e["throughput"] == 4 / 0.2 and e["stall_mean_pct"] == 50.0 and e["au_pct"] == 50.0
    e = overlapped.expected(batch_size=4, handoff_s=0.002)
    assert abs(e["throughput"] - 4 / 0.102) < 1e-9 and abs(e["au_pct"] - 100 / 102 * 100) < 1e-9
