"""On CUDA, what a training step of this cell's model costs in device memory, measured: forward and
backward of the bare model at two batch sizes of the largest image, each peak from
torch.cuda.max_memory_allocated, after one discarded warm-up pass (the first pass allocates
cuBLAS/cuDNN workspaces and handles once; measured cold, they inflated the intercept and the
slope). The slope is the bytes per padded pixel (pixels) or per sample (features); the intercept
the model state.

Not in the bare model's pass, added: SGD's momentum buffers (one copy of the parameters); with
device preprocessing, the batch's decoded-and-resized buffers (a uint8 and two float32 copies of
the padded batch, 27 bytes per padded pixel). DDP's gradients live in its buckets
(gradient_as_bucket_view), so they cost no second copy. Not in the plan: nvJPEG's full-resolution
decode of the source JPEGs (it depends on each source's size); a batch that still runs out is split
after the OOM (harness.train.ddpstep). The budget is what this process may use: the free memory
torch.cuda.mem_get_info reports plus what the caching allocator already holds; with `sharing` ranks
on the GPU (--share-gpu) its share of the free memory.

The bare model is probed, not its DDP wrapper: at several ranks a probe through DDP would put its
passes in the gradient allreduce, where one rank's OOM breaks the collective sequence (the probe's
failure is agreed instead: harness.train.trainloop.plan_memory). DDP's gradients are views of its
buckets (gradient_as_bucket_view), the same bytes as the bare model's .grad during the probe's
backward; scripts/gpu/memcheck.py measures both probes against real DDP steps."""
from __future__ import annotations

import torch

from harness.data.fields import MAX_TOKENS

PROBE_BATCHES = (4, 8)
DEVICE_PREP_BYTES_PER_PIXEL = 3 + 12 + 12  # uint8 resized + float32 padded + float32 normalised, x 3 channels
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


def measure(model, workload: str, image_size: int, precision, where: torch.device,
            device_preprocess: bool = False, sharing: int = 1) -> tuple[float, float, float]:
    """(base bytes, bytes per unit, budget bytes) of this model on this GPU."""
    _peak(model, _batch(workload, PROBE_BATCHES[0], image_size, where), precision, where)  # warm-up, discarded
    units, peaks = [], []
    for n in PROBE_BATCHES:
        peaks.append(_peak(model, _batch(workload, n, image_size, where), precision, where))
        units.append(n * image_size * image_size if workload == "pixels" else n)
    per_unit = max(0.0, (peaks[1] - peaks[0]) / (units[1] - units[0]))
    if device_preprocess and workload == "pixels":
        per_unit += DEVICE_PREP_BYTES_PER_PIXEL
    momentum = sum(p.numel() * p.element_size() for p in model.parameters())  # SGD's buffers, not probed
    base = peaks[0] - per_unit * units[0] + momentum
    free, _total = torch.cuda.mem_get_info(where)
    budget = HEADROOM * (free / max(sharing, 1) + torch.cuda.memory_reserved(where))
    torch.cuda.reset_peak_memory_stats(where)
    return float(base), float(per_unit), float(budget)
