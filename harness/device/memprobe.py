"""On CUDA, what a training step of this cell's model costs in device memory, measured: forward and
backward (no gradient allreduce: the bare model, not its DDP wrapper) at two batch sizes of the largest
image, each peak from torch.cuda.max_memory_allocated. The slope is the bytes per padded pixel (pixels) or
per sample (features); the intercept the model state. The budget is what this process may use: the free
memory torch.cuda.mem_get_info reports plus what the caching allocator already holds."""
from __future__ import annotations

import torch

from harness.data.fields import MAX_TOKENS

PROBE_BATCHES = (2, 4)
HEADROOM = 0.9  # of the budget; the rest absorbs fragmentation and the allocator's rounding


def _batch(workload: str, n: int, side: int, where: torch.device) -> dict:
    if workload == "pixels":
        return {"images": torch.randint(0, 255, (n, 3, side, side), dtype=torch.uint8, device=where),
                "tokens": torch.randint(1, 100, (n, MAX_TOKENS), device=where)}
    return {"image_emb": torch.randn(n, 2048, device=where), "text_emb": torch.randn(n, 768, device=where)}


def _peak(model, batch: dict, precision, where: torch.device) -> int:
    model.zero_grad(set_to_none=True)
    torch.cuda.synchronize(where)
    torch.cuda.reset_peak_memory_stats(where)
    with precision.autocast() if precision is not None else torch.autocast("cuda", enabled=False):
        loss = model(batch)
    loss.backward()
    torch.cuda.synchronize(where)
    peak = torch.cuda.max_memory_allocated(where)
    model.zero_grad(set_to_none=True)
    return peak


def measure(model, workload: str, image_size: int, precision, where: torch.device) -> tuple[float, float, float]:
    """(base bytes, bytes per unit, budget bytes) of this model on this GPU."""
    units, peaks = [], []
    for n in PROBE_BATCHES:
        peaks.append(_peak(model, _batch(workload, n, image_size, where), precision, where))
        units.append(n * image_size * image_size if workload == "pixels" else n)
    per_unit = max(0.0, (peaks[1] - peaks[0]) / (units[1] - units[0]))
    momentum = sum(p.numel() * p.element_size() for p in model.parameters())  # SGD's buffers, not probed
    base = peaks[0] - per_unit * units[0] + momentum
    free, _total = torch.cuda.mem_get_info(where)
    budget = HEADROOM * (free + torch.cuda.memory_reserved(where))
    torch.cuda.reset_peak_memory_stats(where)
    return float(base), float(per_unit), float(budget)
