"""A host-to-device copy on a side stream overlaps a matrix product on the default stream.

A pinned host buffer of COPY_MB is copied (non_blocking) to the GPU; the products are sized so that they
take about as long as the copy. Timed with CUDA events: the copy alone, the products alone, then both at once
(the copy on a side stream, the products on the default stream, joined by events). The overlap is
(copy + products - both) / the shorter of the two: 1 = fully hidden, 0 = serialised. Holds when it is at
least 0.5 (what side_stream = true relies on: the next batch's copy hidden behind this step's compute).
On a CPU machine it is skipped (exit 77)."""
from __future__ import annotations

import statistics
import sys

import gpucommon

COPY_MB, SIDE, TRIES, MIN_OVERLAP = 1024, 8192, 3, 0.5


def _events(torch):
    return torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)


def run(torch, host, dev, a, b, k: int, side, what: str) -> float:
    """Event seconds on the default stream of the copy, the k products, or both (copy on `side`)."""
    torch.cuda.synchronize()
    start, end = _events(torch)
    start.record()
    if what in ("copy", "both"):
        stream = side if what == "both" else torch.cuda.current_stream()
        stream.wait_event(start)
        with torch.cuda.stream(stream):
            dev.copy_(host, non_blocking=True)
            copied = torch.cuda.Event()
            copied.record(stream)
    if what in ("products", "both"):
        for _ in range(k):
            a @ b
    if what in ("copy", "both"):
        torch.cuda.current_stream().wait_event(copied)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3


def main(argv: list[str] | None = None) -> int:
    args = gpucommon.parser(__doc__).parse_args(argv)
    gpucommon.cuda_or_skip("streams")
    import torch

    host = torch.empty(COPY_MB << 20, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty_like(host, device="cuda")
    a = torch.randn(SIDE, SIDE, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(SIDE, SIDE, device="cuda", dtype=torch.bfloat16)
    side = torch.cuda.Stream()
    run(torch, host, dev, a, b, 32, side, "both")  # warm-up: cuBLAS, the copy engine, the clocks up from idle
    one = statistics.median(run(torch, host, dev, a, b, 1, side, "products") for _ in range(TRIES))
    copy = statistics.median(run(torch, host, dev, a, b, 0, side, "copy") for _ in range(TRIES))
    k = max(1, round(copy / one))
    products = statistics.median(run(torch, host, dev, a, b, k, side, "products") for _ in range(TRIES))
    both = statistics.median(run(torch, host, dev, a, b, k, side, "both") for _ in range(TRIES))
    overlap = (copy + products - both) / min(copy, products)
    figures = {"copy_ms": round(copy * 1e3, 3), "products_ms": round(products * 1e3, 3), "products": k,
               "both_ms": round(both * 1e3, 3), "overlap": round(overlap, 3), "copy_gb_s": round(
                   (COPY_MB << 20) / copy / 1e9, 1), "pinned": bool(host.is_pinned())}
    why = (f"copy {figures['copy_ms']} ms + {k} products {figures['products_ms']} ms took "
           f"{figures['both_ms']} ms together: overlap {overlap:.2f} (needs >= {MIN_OVERLAP})")
    return gpucommon.finish("streams", overlap >= MIN_OVERLAP, figures, args.out, why)


if __name__ == "__main__":
    sys.exit(main())
