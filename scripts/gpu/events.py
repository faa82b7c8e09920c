"""CUDA-event time is GPU time only when the events are recorded around the launched work.

The same GPU work (2k matrix products: bf16 from compute capability 8.0, fp16 below, where bf16 is
emulated) is timed three ways, each the median of 3 interleaved tries (after products that bring the clocks
up). k is sized from the product's measured time so that k products take about a quarter of the sleep on
this GPU: the gap is then really there whatever the GPU (a fixed k of 8 needed about 440 TFLOP/s of bf16 to
finish inside the sleep: an H200, not an A100 or a V100):
  gpu_only    one event pair around the 2k products, launched back to back;
  wide        one pair around k products, a host sleep of SLEEP_S, then k more: the GPU idles during the
              sleep and the pair counts that idle time (what a step timer recorded after a synchronize does);
  around      one pair around each group of k products, the sleep between the pairs: the sum of the pairs.
  harness     the harness's own step timer (harness.device.devices.CudaDevice: start_timer before the first
              launch, stop_timer after the last, then the host sleeps before timed_compute_s reads it).
The GPU runs the first k products during the sleep, then idles until the host wakes and launches the
other k: `wide` exceeds `gpu_only` by about SLEEP_S - k t (t: one product's time, k t = gpu_only / 2), the
idle time, not by the whole sleep. Holds (`decide`) when `around` and `harness` are within 10% (or 1 ms) of
`gpu_only` (event time excludes the host's time) and `wide` exceeds `gpu_only` by at least GAP_SHARE of
that idle time (the gap is really there, so the first result means something). On a CPU machine it is
skipped (exit 77)."""
from __future__ import annotations

import statistics
import sys
import time

import gpucommon

SIDE, SLEEP_S, TRIES, WARMUP_S = 8192, 0.1, 3, 0.5
K_SHARE = 0.25  # of the sleep, taken by k products
K_MAX = 64
K = 8  # set by main from the measured rate (sized_k)
GAP_SHARE = 0.8  # of the GPU's idle time in the sleep, that `wide` must show
IDLE_LEAST = 0.25  # of the sleep: an idle time below it (k products nearly filling the sleep) shows nothing
CLOSE_SHARE, CLOSE_S = 0.10, 1e-3  # `around` and `harness` within this of `gpu_only`


def k_for(one_s: float) -> int:
    """Products per group: k of them take about K_SHARE of the sleep at `one_s` seconds each (1 to K_MAX)."""
    return max(1, min(K_MAX, int(K_SHARE * SLEEP_S / one_s)))


def idle_s(gpu_only_s: float, sleep_s: float = SLEEP_S) -> float:
    """The GPU's idle time inside the `wide` pair: the sleep less the first group (half of gpu_only)."""
    return max(0.0, sleep_s - gpu_only_s / 2)


def decide(t: dict[str, float], sleep_s: float = SLEEP_S) -> dict[str, bool]:
    """The verdicts on the median event seconds `t` (gpu_only, wide, around, harness): the host gap excluded
    (`around`), the harness's timer excludes the host wait (`harness`), and the gap seen (`wide` over
    `gpu_only` by at least GAP_SHARE of the idle time, which follows from the sizes, not a fixed figure; an
    idle time under IDLE_LEAST of the sleep is no gap to see)."""
    def close(x: float) -> bool:
        return abs(x - t["gpu_only"]) <= max(CLOSE_SHARE * t["gpu_only"], CLOSE_S)

    idle = idle_s(t["gpu_only"], sleep_s)
    return {"excludes_gap": close(t["around"]), "harness_ok": close(t["harness"]),
            "gap_seen": idle >= IDLE_LEAST * sleep_s and t["wide"] - t["gpu_only"] >= GAP_SHARE * idle}


def _products(a, b, k: int) -> None:
    for _ in range(k):
        a @ b


def _pair(torch):
    return torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)


def timed(torch, a, b, mode: str) -> float:
    """Event seconds of the 2K products timed the `mode` way."""
    torch.cuda.synchronize()
    if mode == "gpu_only":
        s, e = _pair(torch)
        s.record()
        _products(a, b, 2 * K)
        e.record()
        e.synchronize()
        return s.elapsed_time(e) / 1e3
    if mode == "wide":
        s, e = _pair(torch)
        s.record()
        _products(a, b, K)
        time.sleep(SLEEP_S)
        _products(a, b, K)
        e.record()
        e.synchronize()
        return s.elapsed_time(e) / 1e3
    if mode == "harness":  # the harness's own step timer, the host waiting after the last launch
        from harness.device.devices import CudaDevice

        device = CudaDevice(0)
        device.start_timer()
        _products(a, b, 2 * K)
        device.stop_timer()
        time.sleep(SLEEP_S)
        return device.timed_compute_s()
    (s1, e1), (s2, e2) = _pair(torch), _pair(torch)
    s1.record()
    _products(a, b, K)
    e1.record()
    time.sleep(SLEEP_S)
    s2.record()
    _products(a, b, K)
    e2.record()
    e2.synchronize()
    return (s1.elapsed_time(e1) + s2.elapsed_time(e2)) / 1e3


def sized_k(torch, a, b) -> tuple[int, float]:
    """k such that k products take about K_SHARE of the sleep, from the median time of one product (after
    WARMUP_S of products: cuBLAS's handle and heuristics, the clocks up from idle); and that time."""
    started = time.perf_counter()
    while time.perf_counter() - started < WARMUP_S:
        _products(a, b, 1)
        torch.cuda.synchronize()
    seen = []
    for _ in range(5):
        s, e = _pair(torch)
        s.record()
        _products(a, b, 1)
        e.record()
        e.synchronize()
        seen.append(s.elapsed_time(e) / 1e3)
    one = statistics.median(seen)
    return k_for(one), one


def main(argv: list[str] | None = None) -> int:
    args = gpucommon.parser(__doc__).parse_args(argv)
    gpucommon.cuda_or_skip("events")
    import torch

    global K
    dtype = torch.bfloat16 if torch.cuda.get_device_capability(0)[0] >= 8 else torch.float16
    a = torch.randn(SIDE, SIDE, device="cuda", dtype=dtype)
    b = torch.randn(SIDE, SIDE, device="cuda", dtype=dtype)
    K, one = sized_k(torch, a, b)
    tries = {m: [] for m in ("gpu_only", "wide", "around", "harness")}
    for _ in range(TRIES):  # interleaved: the three see the same clocks
        for m, seen in tries.items():
            seen.append(timed(torch, a, b, m))
    t = {m: statistics.median(seen) for m, seen in tries.items()}
    verdict = decide(t)
    excludes_gap, harness_ok, gap_seen = verdict["excludes_gap"], verdict["harness_ok"], verdict["gap_seen"]
    figures = {f"{m}_ms": round(v * 1e3, 3) for m, v in t.items()}
    figures.update(sleep_ms=SLEEP_S * 1e3, products=2 * K, side=SIDE, dtype=str(dtype).removeprefix("torch."),
                   idle_ms=round(idle_s(t["gpu_only"]) * 1e3, 3),
                   gap_needed_ms=round(GAP_SHARE * idle_s(t["gpu_only"]) * 1e3, 3),
                   one_product_ms=round(one * 1e3, 3), k=K,
                   tflops=round(2 * K * 2 * SIDE**3 / t["gpu_only"] / 1e12, 1))
    why = (f"around the launched work {figures['around_ms']} ms vs GPU-only {figures['gpu_only_ms']} ms "
           f"({'host gap excluded' if excludes_gap else 'HOST GAP COUNTED'}); one pair over the sleep "
           f"{figures['wide_ms']} ms ({'gap seen' if gap_seen else 'GAP NOT SEEN: the sleep hid no idle GPU'}: "
           f"{figures['gap_needed_ms']} ms more needed); "
           f"the harness's timer {figures['harness_ms']} ms "
           f"({'host wait excluded' if harness_ok else 'HOST WAIT COUNTED'})")
    return gpucommon.finish("events", excludes_gap and gap_seen and harness_ok, figures, args.out, why)


if __name__ == "__main__":
    sys.exit(main())
