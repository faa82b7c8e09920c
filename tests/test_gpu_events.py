"""The events stage's decision (scripts/gpu/events.py) on simulated CUDA-event timings: a GPU of 0.3 to 10 ms
per 8192x8192 product (an H200 to a slow card) passes when the events time what they should, and each fault
the stage looks for (a pair that counts the host's sleep, a timer that counts the host's wait, a sleep that
hid no idle GPU) fails it. No GPU is needed: the timings are what the GPU's clock would show."""
from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

CHECKS = Path(__file__).resolve().parents[1] / "scripts" / "gpu"
PER_PRODUCT_MS = (0.3, 0.5, 0.7, 1.0, 1.4, 2.0, 3.0, 4.5, 6.0, 8.0, 10.0)
LAUNCH_S = 10e-6  # the host's time to launch one product
OVERSLEEP_S = 0.3e-3  # time.sleep wakes a little late


def events():
    if str(CHECKS) not in sys.path:
        sys.path.insert(0, str(CHECKS))
    return importlib.import_module("events")


def simulated(one_s: float, k: int | None = None) -> dict[str, float]:
    """The event seconds each way of timing shows on a GPU taking `one_s` per product, k sized as the stage
    sizes it. wide: the GPU runs the first k products while the host sleeps, idles until the host wakes and
    launches the other k; the other ways time the 2k products alone."""
    ev = events()
    k = ev.k_for(one_s) if k is None else k
    first_done = k * one_s
    second_start = max(first_done, k * LAUNCH_S + ev.SLEEP_S + OVERSLEEP_S + LAUNCH_S)
    gpu_only = 2 * k * one_s
    return {"gpu_only": gpu_only, "wide": second_start + k * one_s, "around": gpu_only * 1.001,
            "harness": gpu_only * 1.002}


@pytest.mark.parametrize("one_ms", PER_PRODUCT_MS)
def test_a_gpu_that_times_right_passes_whatever_its_speed(one_ms):
    verdict = events().decide(simulated(one_ms / 1e3))
    assert verdict == {"excludes_gap": True, "harness_ok": True, "gap_seen": True}, (one_ms, verdict)


def test_the_gap_needed_follows_from_the_sizes():
    ev = events()
    t = simulated(1.4e-3)  # an H200's bf16 product: k = 17, k t = 23.8 ms, the GPU idles 76.2 ms
    assert ev.k_for(1.4e-3) == 17
    assert ev.idle_s(t["gpu_only"]) == pytest.approx(ev.SLEEP_S - 17 * 1.4e-3)
    assert t["wide"] - t["gpu_only"] < 0.8 * ev.SLEEP_S  # what a fixed 80 ms asked for: never there


@pytest.mark.parametrize("one_ms", (0.3, 1.4, 10.0))
def test_each_fault_fails_its_verdict(one_ms):
    ev = events()
    good = simulated(one_ms / 1e3)
    slept = ev.SLEEP_S + OVERSLEEP_S
    assert not ev.decide({**good, "wide": good["gpu_only"]})["gap_seen"]  # the pair missed the idle GPU
    assert not ev.decide({**good, "wide": good["gpu_only"] + 0.5 * ev.idle_s(good["gpu_only"])})["gap_seen"]
    assert not ev.decide({**good, "around": good["gpu_only"] + slept})["excludes_gap"]  # counted the sleep
    assert not ev.decide({**good, "harness": good["gpu_only"] + slept})["harness_ok"]  # counted the wait


def test_products_that_fill_the_sleep_show_no_gap():
    """k products as long as the sleep (k held at 1 on a very slow GPU): the GPU never idles, so the pair
    over the sleep proves nothing, and the stage says the gap was not seen."""
    verdict = events().decide(simulated(0.12, k=1))
    assert not verdict["gap_seen"] and verdict["excludes_gap"]
