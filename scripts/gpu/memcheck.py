"""The memory probe's prediction (harness/device/memprobe.py, what dynamic batching plans with) against the
peak device memory of real training steps.

For each precision (amp, fp32) a fresh model of the pixels workload (ResNet-50 CLIP, as a cell builds it) is
probed with memprobe.measure, then wrapped as a cell wraps it (ddpstep.make_ddp; one rank, NCCL) with SGD and
momentum, and trained with the harness's own step (ddpstep.train_step, timed by CudaDevice as the loop does)
for a few steps at each batch size of SIZES at the gpu scenario's image size, host preprocessing. The peak
of the last step at each size (CudaDevice.last_bytes: torch.cuda.max_memory_allocated over the step) is
compared with base + bytes per padded pixel x its pixels. Holds when every prediction is within 15% of the
measured peak. The probe is run on the model as the harness runs it (bare, before DDP: memprobe's docstring
says why) and again on the DDP-wrapped model, whose predictions are reported beside (`ddp_*`: what DDP's
buckets change), not asserted. On a CPU machine it is skipped (exit 77)."""
from __future__ import annotations

import os
import sys

import gpucommon

SIZES, IMAGE_SIZE, STEPS, TOLERANCE = (16, 48, 96), 160, 3, 0.15
PRECISIONS = ("amp", "fp32")


def batch(torch, n: int, side: int):
    from harness.data.fields import MAX_TOKENS

    return {"images": torch.randint(0, 255, (n, 3, side, side), dtype=torch.uint8, device="cuda"),
            "tokens": torch.randint(1, 100, (n, MAX_TOKENS), device="cuda")}


def real_peak(device, ddp, optimizer, precision, tensors: dict, n: int) -> int:
    """The peak device bytes of the last of STEPS harness training steps on this batch, as a cell records it
    (CudaDevice's per-step peak, read once the step's events are done)."""
    from harness.train.ddpstep import train_step

    for _ in range(STEPS):
        device.start_timer()
        train_step(ddp, optimizer, device, tensors, n, n * IMAGE_SIZE * IMAGE_SIZE, False, precision)
        device.stop_timer()
        device.synchronize()
        device.timed_compute_s()
    return int(device.last_bytes)


def one_precision(torch, name: str) -> dict:
    from harness.device import memprobe
    from harness.device.devices import CudaDevice
    from harness.device.standin import build_model
    from harness.train.ddpstep import StepPrecision, make_ddp
    from strategies.registry import create

    device = CudaDevice(0)
    precision = StepPrecision(create("precision", name), cuda=True)
    torch.manual_seed(0)
    model = build_model("pixels", True).to(device.torch_device)
    base, per_pixel, budget = memprobe.measure(model, "pixels", IMAGE_SIZE, precision, device.torch_device)
    ddp = make_ddp(model)
    ddp_base, ddp_per_pixel, _ = memprobe.measure(ddp, "pixels", IMAGE_SIZE, precision, device.torch_device)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    rows = {}
    for n in SIZES:
        real = real_peak(device, ddp, optimizer, precision, batch(torch, n, IMAGE_SIZE), n)
        pixels = n * IMAGE_SIZE * IMAGE_SIZE
        predicted, ddp_predicted = base + per_pixel * pixels, ddp_base + ddp_per_pixel * pixels
        error = (predicted - real) / real
        rows[str(n)] = {"predicted_gb": round(predicted / 1e9, 3), "real_gb": round(real / 1e9, 3),
                        "error_pct": round(100 * error, 1), "ok": abs(error) <= TOLERANCE,
                        "ddp_predicted_gb": round(ddp_predicted / 1e9, 3),
                        "ddp_error_pct": round(100 * (ddp_predicted - real) / real, 1)}
    del ddp, model, optimizer
    torch.cuda.empty_cache()
    return {"base_gb": round(base / 1e9, 3), "bytes_per_pixel": round(per_pixel, 2),
            "ddp_base_gb": round(ddp_base / 1e9, 3), "ddp_bytes_per_pixel": round(ddp_per_pixel, 2),
            "budget_gb": round(budget / 1e9, 2), "batches": rows}


def main(argv: list[str] | None = None) -> int:
    args = gpucommon.parser(__doc__).parse_args(argv)
    gpucommon.cuda_or_skip("memcheck")
    import torch
    import torch.distributed as dist

    from harness.run.launch import free_port
    from strategies.registry import load_builtins

    load_builtins()
    torch.cuda.set_device(0)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    dist.init_process_group("nccl", rank=0, world_size=1)
    try:
        figures = {name: one_precision(torch, name) for name in PRECISIONS}
    finally:
        dist.destroy_process_group()
    rows = [(p, n, r) for p, f in figures.items() for n, r in f["batches"].items()]
    worst = max(rows, key=lambda row: abs(row[2]["error_pct"]))
    ok = all(r["ok"] for _, _, r in rows)
    why = (f"{sum(r['ok'] for _, _, r in rows)}/{len(rows)} predictions within {TOLERANCE:.0%} of the real "
           f"peak; worst {worst[0]} batch {worst[1]}: predicted {worst[2]['predicted_gb']} GB, real "
           f"{worst[2]['real_gb']} GB ({worst[2]['error_pct']:+.1f}%)")
    return gpucommon.finish("memcheck", ok, figures, args.out, why)


if __name__ == "__main__":
    sys.exit(main())
