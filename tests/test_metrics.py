"""The figures of one cell (harness.metrics) computed from hand-made rank records with known answers."""
from __future__ import annotations

import pytest

from harness.metrics import cell_figures, coverage


def record(rank, wait, compute, sync, window_s, samples_per_step=4, pss=100e6, rss=150e6):
    step = [w + c for w, c in zip(wait, compute)]
    return {"rank": rank, "wait": wait, "h2d": [0.0] * len(wait), "compute": compute, "sync": sync,
            "padded": [0.0] * len(wait), "step": step, "steps": len(wait), "window_s": window_s,
            "samples": samples_per_step * len(wait), "padded_pixels": 1000 * len(wait),
            "real_pixels": 800 * len(wait), "nbytes": 10_000 * len(wait), "host_pss_peak": pss,
            "host_rss_peak": rss, "device_peak_bytes": 2e9, "overruns": 1,
            "batch_sizes": [samples_per_step] * len(wait), "oom_events": 0, "shadow_steps": 0}


def test_known_values():
    r0 = record(0, wait=[0.1, 0.1], compute=[0.3, 0.3], sync=[0.0, 0.0], window_s=0.8)
    r1 = record(1, wait=[0.3, 0.3], compute=[0.1, 0.1], sync=[0.0, 0.0], window_s=1.0, pss=300e6)
    f = cell_figures([r1, r0])
    assert f["throughput"] == pytest.approx(16 / 1.0)  # slowest rank's window
    assert f["stall_mean_pct"] == pytest.approx((25 + 75) / 2)
    assert f["stall_max_pct"] == pytest.approx(75)
    assert f["au_pct"] == pytest.approx((0.6 / 0.8 * 100 + 0.2 / 1.0 * 100) / 2)
    assert f["imbalance"] == pytest.approx(1.0)  # both ranks busy 0.8 s
    assert f["host_pss_peak_mb"] == pytest.approx(300) and f["host_pss_total_mb"] == pytest.approx(400)
    assert f["padding_waste_pct"] == pytest.approx(20)
    assert f["step_p50_ms"] == pytest.approx(400)
    assert f["overrun_pct"] == pytest.approx(50)


def test_imbalance_excludes_time_waiting_for_other_ranks():
    fast = record(0, wait=[0.1], compute=[0.5], sync=[0.3], window_s=0.6)
    slow = record(1, wait=[0.4], compute=[0.2], sync=[0.0], window_s=0.6)
    f = cell_figures([fast, slow])
    # busy: fast 0.3 s, slow 0.6 s -> max/mean = 0.6/0.45
    assert f["imbalance"] == pytest.approx(0.6 / 0.45)


def test_no_steps_gives_no_rates():
    r = record(0, wait=[], compute=[], sync=[], window_s=0.0)
    f = cell_figures([r])
    assert "throughput" not in f and f["window_steps"] == 0


def consumed_record(rank, epochs, completed):
    return {"rank": rank, "consumed": epochs, "completed_epochs": completed}


def test_coverage_accepts_distributed_sampler_padding():
    # 5 samples on 2 ranks: torch pads one index (0) so both ranks get 3
    records = [consumed_record(0, {0: [3, 0, 4]}, 1), consumed_record(1, {0: [1, 2, 0]}, 1)]
    cov = coverage(records, 5)
    assert cov["ok"] and cov["padding_allowed"] == 1 and cov["coverage_pct"] == 100.0
    assert cov["epochs"][0]["duplicates"] == 1 and cov["epochs"][0]["missing"] == 0


def test_coverage_flags_duplicates_and_missing():
    records = [consumed_record(0, {0: [0, 1, 2]}, 1), consumed_record(1, {0: [0, 1, 2]}, 1)]
    cov = coverage(records, 6)
    e = cov["epochs"][0]
    assert not cov["ok"] and e["duplicates"] == 3 and e["missing"] == 3 and e["broken"]


def test_partial_epoch_judges_duplicates_only():
    records = [consumed_record(0, {"0": [0, 1], "1": [5]}, 1), consumed_record(1, {"0": [2, 3], "1": [3]}, 1)]
    cov = coverage(records, 4)
    assert not cov["ok"]  # index 5 does not exist
    assert cov["epochs"][1]["out_of_range"] == 1 and cov["epochs"][1]["missing"] is None
    records[0]["consumed"]["1"] = [1]
    assert coverage(records, 4)["ok"]
