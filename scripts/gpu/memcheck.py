"""The memory probe's prediction (harness/device/memprobe.py, what dynamic batching plans with) against the
peak device memory of real training steps.

For each precision (amp, fp32) a fresh model of the pixels workload (ResNet-50 CLIP, as a cell builds it) is
probed with memprobe.measure, then wrapped in DDP (one rank, NCCL) with SGD and momentum, and trained for a few
steps at each batch size of SIZES at the gpu scenario's image size: zero_grad, forward under the precision's
autocast, backward (scaled for amp), optimizer step. The peak of the last step at each size
(torch.cuda.max_memory_allocated, reset before that step) is compared with base + bytes per padded pixel x
its pixels. Holds when every prediction is within 15% of the measured peak. On a CPU machine it is skipped
(exit 77)."""
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


def step(ddp, optimizer, precision, tensors) -> None:
    optimizer.zero_grad(set_to_none=True)
    with precision.autocast():
        loss = ddp(tensors)
    precision.backward(loss)
    precision.step(optimizer)


def one_precision(torch, name: str) -> dict:
    from torch.nn.parallel import DistributedDataParallel as DDP

    from harness.device import memprobe
    from harness.device.standin import build_model
    from harness.train.trainstep import StepPrecision
    from strategies.registry import create

    where = torch.device("cuda", 0)
    precision = StepPrecision(create("precision", name), cuda=True)
    torch.manual_seed(0)
    model = build_model("pixels", True).to(where)
    base, per_pixel, budget = memprobe.measure(model, "pixels", IMAGE_SIZE, precision, where)
    ddp = DDP(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    rows = {}
    for n in SIZES:
        tensors = batch(torch, n, IMAGE_SIZE)
        for i in range(STEPS):
            if i == STEPS - 1:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats(where)
            step(ddp, optimizer, precision, tensors)
        torch.cuda.synchronize()
        real = torch.cuda.max_memory_allocated(where)
        predicted = base + per_pixel * n * IMAGE_SIZE * IMAGE_SIZE
        error = (predicted - real) / real
        rows[str(n)] = {"predicted_gb": round(predicted / 1e9, 3), "real_gb": round(real / 1e9, 3),
                        "error_pct": round(100 * error, 1), "ok": abs(error) <= TOLERANCE}
    del ddp, model, optimizer
    torch.cuda.empty_cache()
    return {"base_gb": round(base / 1e9, 3), "bytes_per_pixel": round(per_pixel, 2),
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
