"""One training step on one rank: forward, backward (with DDP's gradient allreduce) and optimizer step.

The OOM policy lives here. When a batch does not fit and the batching strategy allows it (splits_on_oom),
the batch is split into 2, 4, 8... micro-batches whose gradients accumulate locally (no_sync) before the
last one joins the allreduce; the gradients equal the whole batch's. The emulated device knows in advance
what fits; on a real GPU each split is tried until one runs without torch.OutOfMemoryError. Without
splitting, the error propagates to the caller.
"""
from __future__ import annotations

import torch


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def micro_batches_needed(device, samples: int, per_sample_pixels: int) -> int:
    """The fewest micro-batches (a power of two) the device says fit; above `samples` if none does."""
    parts = 1
    while parts <= samples and not device.fits(_ceil_div(samples, parts),
                                               _ceil_div(samples, parts) * per_sample_pixels):
        parts *= 2
    return parts


def split(tensors: dict, samples: int, parts: int) -> list[dict]:
    """The batch cut along its first dimension into `parts` micro-batches (the last may be smaller)."""
    size = _ceil_div(samples, parts)
    return [{k: v[i:i + size] for k, v in tensors.items()} for i in range(0, samples, size)]


def accumulate(ddp, device, parts: list[dict], samples: int, per_sample_pixels: int) -> None:
    """Forward and backward of each micro-batch, its loss weighted by its share of the batch; gradients
    accumulate locally (no_sync) and the last micro-batch's backward joins the allreduce."""
    for i, part in enumerate(parts):
        n = len(next(iter(part.values())))
        device.begin_step(n, n * per_sample_pixels)
        if i == len(parts) - 1:
            (ddp(part) * (n / samples)).backward()
        else:
            with ddp.no_sync():
                (ddp(part) * (n / samples)).backward()
            device.pad()


def _split_step(ddp, optimizer, device, tensors: dict, samples: int, per_sample_pixels: int,
                parts: int) -> None:
    """Accumulate over `parts` micro-batches, doubling them after each OutOfMemoryError, then step."""
    while True:
        if parts > samples:
            raise torch.OutOfMemoryError("a single sample does not fit the device")
        optimizer.zero_grad(set_to_none=True)
        device.empty_cache()
        try:
            accumulate(ddp, device, split(tensors, samples, parts), samples, per_sample_pixels)
            break
        except torch.OutOfMemoryError:  # a real GPU: try smaller micro-batches
            parts *= 2
    optimizer.step()


def train_step(ddp, optimizer, device, tensors: dict, samples: int, padded_pixels: int,
               split_on_oom: bool) -> int:
    """One step on the batch; returns the OOM events handled (1 if it had to be split, else 0)."""
    optimizer.zero_grad(set_to_none=True)
    per_sample = padded_pixels // max(samples, 1)
    parts = micro_batches_needed(device, samples, per_sample)
    if parts == 1 or not split_on_oom:
        try:
            device.begin_step(samples, padded_pixels)
            ddp(tensors).backward()
            optimizer.step()
            return 0
        except torch.OutOfMemoryError:
            if not split_on_oom:
                raise
            parts = 2
    _split_step(ddp, optimizer, device, tensors, samples, per_sample, parts)
    return 1


def shadow_step(ddp, optimizer, device, tensors: dict) -> None:
    """A zero-weight step for a rank without data, so the others' gradient allreduce completes."""
    optimizer.zero_grad(set_to_none=True)
    device.begin_step(0, 0)
    (ddp(tensors) * 0.0).backward()
    optimizer.step()
