"""The figures of DESIGN.md section 6 computed from hand-made rank records with known answers."""
from __future__ import annotations

import pytest

from harness.metrics import cell_figures


def record(rank, wait, compute, sync, window_s, samples_per_step=4, pss=100e6, rss=150e6):
    step = [w + c for w, c in zip(wait, compute)]
    return {"rank": rank, "wait": wait, "h2d": [0.0] * len(wait), "compute": compute, "sync": sync,
            "padded": [0.0] * len(wait), "step": step, "steps": len(wait), "window_s": window_s,
            "samples": samples_per_step * len(wait), "padded_pixels": 1000 * len(wait),
            "real_pixels": 800 * len(wait), "nbytes": 10_000 * len(wait), "host_pss_peak": pss,
            "host_rss_peak": rss, "device_peak_bytes": 2e9, "overruns": 1}


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
