"""check-remote's prediction (harness.checks.remote.model) is the target model's, built as
harness.analysis.checkcases builds a case's: one reading worker's rate 1 / (its own time + bytes / bandwidth +
requests x latency), and the storage bandwidth bound bandwidth / bytes; the measured side
(harness.checks.remote.sweep) needs root and a shaped link (run by hand, docs/remote.md)."""
from __future__ import annotations

import pytest

from harness.checks.remote import command as check_remote
from harness.checks.remote import model as remotecheck
from harness.errors import UsageError


def test_the_prediction_is_the_model_s_cold_read():
    check = remotecheck
    cal = {"own_s_per_sample": 0.002, "bytes_per_sample": 200_000, "requests_per_sample": 0.25}
    rate, io, binds, bound = check.predicted(cal, latency_s=0.004, bandwidth=10.0)
    assert io == pytest.approx(0.02 + 0.001)  # 0.2 MB at 10 MB/s, a quarter of a 4 ms request
    assert rate == pytest.approx(1 / (0.002 + 0.021), rel=1e-3) and binds == "loader workers"
    assert bound == pytest.approx(50.0)  # 10 MB/s over 0.2 MB per sample
    unshaped, io0, _, bound0 = check.predicted(cal, latency_s=0.004, bandwidth=0.0)
    assert io0 == pytest.approx(0.001) and unshaped == pytest.approx(1 / 0.003, rel=1e-3) and bound0 == float("inf")


def test_requests_in_flight_and_the_store_s_capacity_reach_the_prediction():
    check = remotecheck
    cal = {"own_s_per_sample": 0.0005, "bytes_per_sample": 12_000, "requests_per_sample": 2.0}
    before = check.predicted(cal, latency_s=0.004, bandwidth=0.0)[0]
    assert before == pytest.approx(1 / (0.0005 + 0.008), rel=1e-3)  # two GETs one after another
    eight, io, binds, _ = check.predicted(cal, latency_s=0.004, bandwidth=0.0, in_flight=8)
    assert io == pytest.approx(0.001) and eight == pytest.approx(1 / 0.0015, rel=1e-3)  # 2 x 4 ms / 8
    capped, _, binds, _ = check.predicted(cal, latency_s=0.004, bandwidth=0.0, in_flight=8, store_gets_s=480.0)
    assert binds == "storage ops/s" and capped == pytest.approx(240.0)  # 480 GETs/s over 2 a sample
    # the link as a cap alone: bandwidth / bytes, or the unshaped prediction, whichever is lower
    assert check.link_caps_only(cal, 0.004, 1.0, 1, 0.0) == pytest.approx(1e6 / 12_000)
    assert check.link_caps_only(cal, 0.004, 20.0, 1, 0.0) == pytest.approx(before)


def test_the_table_flags_the_calibration_and_takes_medians():
    check = remotecheck
    got = {"rate": 100.0, "requests_per_sample": 1.0, "bytes_per_sample": 1e4, "request_s": 0.005,
           "wait_s_per_sample": 0.005, "idle_s_per_sample": 0.004, "outside_pct": 3.0}
    rows = [{"setting": s, "case": ("webdataset", 1), "rate": r, "io": 0.005, "binds": "loader workers",
             "bandwidth_bound": 1e3, "before": 2 * r, "capacity": 400.0, "caps_only": 50.0,
             "got": dict(got, rate=m), "cal": got, "latency": 0.005, "idle": 0.004}
            for s, r, m in [(0.0, 100.0, 100.0), (0.0, 90.0, 90.0), (20.0, 80.0, 100.0), (20.0, 100.0, 100.0)]]
    lines = check.table(rows)
    assert "calibration (copy" in lines[2] and "| 190.0 | +100.0 | 95.0 | 95.0 | +0.0 |" in lines[2]
    assert lines[3].startswith("| 20 MB/s (tbf) |") and "| 180.0 | +80.0 | 90.0 | 100.0 | -10.0 |" in lines[3]
    assert "| 400.0 |" in lines[3] and "| 50.0, -50.0 |" in lines[3]  # the store bound; the link as a cap alone


def test_the_command_needs_root_and_prints_the_notes_and_the_table(monkeypatch, capsys):
    monkeypatch.setattr(check_remote.os, "geteuid", lambda: 1000)
    with pytest.raises(UsageError, match="check-remote needs root"):
        check_remote.main(check_remote.CheckRemoteRequest())
    got = {"rate": 100.0, "requests_per_sample": 1.0, "bytes_per_sample": 1e4, "request_s": 0.005,
           "wait_s_per_sample": 0.005, "idle_s_per_sample": 0.004, "outside_pct": 3.0,
           "own_s_per_sample": 0.002, "cpu_s_per_sample": 0.002}
    asked = []

    def run(bandwidths, seconds, rounds, samples):
        asked.append((bandwidths, seconds, rounds, samples))
        return [remotecheck.row(got, dict(got), s, remotecheck.CASES[0], 0.005, 0.004, 400.0) for s in (0.0, 5.0)]

    monkeypatch.setattr(check_remote.os, "geteuid", lambda: 0)
    monkeypatch.setattr(check_remote.sweep, "run", run)
    assert check_remote.main(check_remote.CheckRemoteRequest(bandwidths=(5.0,), rounds=1)) == 0
    assert asked == [([5.0], 8.0, 1, 512)]
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("latency now:") and "400 GETs/s" in out[1] and "median over 1 rounds" in out[2]
    assert out[3] == remotecheck.HEADER and out[5].startswith("| unshaped | webdataset, in_flight 1 |")
    assert out[6].startswith("| 5 MB/s (tbf) |")
