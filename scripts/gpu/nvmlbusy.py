"""NVML sees the GPU busy while it is: utilisation above 0 during matrix products, through the harness's own
sampler (harness.measure.telemetry.NvmlSampler, every 50 ms) on the NVML device whose UUID is torch's cuda:0
(and the harness's own lookup, harness.device.devices.nvml_index_of, must name that same device).

Idle first (IDLE_S, reported only), then BUSY_S of back-to-back bf16 products. Holds when the busy window's
mean utilisation is above 0 and its peak at least 50%. On a CPU machine it is skipped (exit 77)."""
from __future__ import annotations

import sys
import time

import gpucommon

IDLE_S, BUSY_S, SIDE, MIN_PEAK = 0.5, 2.0, 8192, 50


def sample(torch, index: int, busy: bool, seconds: float) -> dict | None:
    from harness.measure.telemetry import NvmlSampler

    a = torch.randn(SIDE, SIDE, device="cuda", dtype=torch.bfloat16)
    with NvmlSampler(index) as nvml:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            if busy:
                for _ in range(8):
                    a @ a
                torch.cuda.synchronize()
            else:
                time.sleep(0.05)
    return nvml.figures()


def main(argv: list[str] | None = None) -> int:
    args = gpucommon.parser(__doc__).parse_args(argv)
    gpucommon.cuda_or_skip("nvmlbusy")
    import torch

    from harness.device.devices import nvml_index_of

    index, harness_index = gpucommon.nvml_index_of(0), nvml_index_of(0)
    if index is None:
        return gpucommon.finish("nvmlbusy", False, {}, args.out, "no NVML device has cuda:0's UUID (or no NVML)")
    if harness_index != index:
        return gpucommon.finish("nvmlbusy", False, {"nvml_index": index, "harness_index": harness_index},
                                args.out, f"the harness reads NVML device {harness_index} for cuda:0, whose UUID "
                                          f"is NVML device {index}")
    idle = sample(torch, index, False, IDLE_S)
    busy = sample(torch, index, True, BUSY_S)
    figures = {"nvml_index": index, "idle": idle, "busy": busy}
    if busy is None:
        return gpucommon.finish("nvmlbusy", False, figures, args.out, "NvmlSampler took no sample")
    ok = busy["nvml_util_mean_pct"] > 0 and busy["nvml_util_max_pct"] >= MIN_PEAK
    idle_text = f"idle mean {idle['nvml_util_mean_pct']:.0f}%" if idle else "idle: no sample"
    why = (f"busy: mean {busy['nvml_util_mean_pct']:.0f}%, peak {busy['nvml_util_max_pct']}% over "
           f"{busy['nvml_samples']} samples (needs mean > 0, peak >= {MIN_PEAK}%); {idle_text}")
    return gpucommon.finish("nvmlbusy", ok, figures, args.out, why)


if __name__ == "__main__":
    sys.exit(main())
