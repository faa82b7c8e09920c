"""One training step on one rank: forward, backward (with DDP's gradient allreduce) and optimizer step.

The OOM policy lives here. When a batch does not fit and the batching strategy allows it (splits_on_oom),
the batch is split into 2, 4, 8... micro-batches whose gradients accumulate locally (no_sync) before the
last one joins the allreduce; the gradients equal the whole batch's. The emulated device knows in advance
what fits; on a real GPU each split is tried until one runs without torch.OutOfMemoryError. Without
splitting, the error propagates to the caller.

Precision: a StepPrecision runs forward under autocast (float16 or bfloat16) and, for float16, scales the
loss with a GradScaler. Only on CUDA: the emulated device's stand-in runs fp32 on the CPU whatever the
precision strategy (its precision changes the modelled time and memory only). None: plain fp32.
"""
from __future__ import annotations

from contextlib import nullcontext

import torch


class StepPrecision:
    """Autocast and loss scaling of one cell on one device (a precision strategy applied)."""

    def __init__(self, strategy, cuda: bool):
        self.cuda = cuda
        self.dtype = getattr(torch, strategy.autocast_dtype) if cuda and strategy.autocast_dtype else None
        self.label = strategy.autocast_dtype or ("tf32" if strategy.tf32 else "fp32")
        if not cuda:  # the stand-in runs fp32 on the CPU; the precision only picks the modelled rate
            self.label = f"{strategy.rate} (modelled; stand-in fp32 on CPU)"
        if cuda:
            torch.backends.cuda.matmul.allow_tf32 = bool(strategy.tf32)
            torch.backends.cudnn.allow_tf32 = bool(strategy.tf32)
            if self.dtype is torch.bfloat16 and not torch.cuda.is_bf16_supported():
                raise ValueError("bf16 is not supported by this GPU")
        self.scaler = torch.amp.GradScaler("cuda") if cuda and strategy.grad_scaler else None

    def autocast(self):
        return torch.autocast("cuda", dtype=self.dtype) if self.dtype is not None else nullcontext()

    def backward(self, loss: torch.Tensor) -> None:
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()

    def step(self, optimizer) -> None:
        if self.scaler is None:
            optimizer.step()
            return
        self.scaler.step(optimizer)  # skipped when the scaled gradients overflowed, as AMP does
        self.scaler.update()


FP32 = None  # no StepPrecision: forward and backward in fp32


def _forward(ddp, tensors: dict, precision: StepPrecision | None) -> torch.Tensor:
    with precision.autocast() if precision is not None else nullcontext():
        return ddp(tensors)


def _backward(loss: torch.Tensor, precision: StepPrecision | None) -> None:
    precision.backward(loss) if precision is not None else loss.backward()


def _step(optimizer, precision: StepPrecision | None) -> None:
    precision.step(optimizer) if precision is not None else optimizer.step()


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


def accumulate(ddp, device, parts: list[dict], samples: int, per_sample_pixels: int,
               precision: StepPrecision | None = FP32) -> None:
    """Forward and backward of each micro-batch, its loss weighted by its share of the batch; gradients
    accumulate locally (no_sync) and the last micro-batch's backward joins the allreduce."""
    for i, part in enumerate(parts):
        n = len(next(iter(part.values())))
        device.begin_step(n, n * per_sample_pixels)
        if i == len(parts) - 1:
            _backward(_forward(ddp, part, precision) * (n / samples), precision)
        else:
            with ddp.no_sync():
                _backward(_forward(ddp, part, precision) * (n / samples), precision)
            device.pad()


def _split_step(ddp, optimizer, device, tensors: dict, samples: int, per_sample_pixels: int,
                parts: int, precision: StepPrecision | None = FP32) -> None:
    """Accumulate over `parts` micro-batches, doubling them after each OutOfMemoryError, then step."""
    while True:
        if parts > samples:
            raise torch.OutOfMemoryError("a single sample does not fit the device")
        optimizer.zero_grad(set_to_none=True)
        device.empty_cache()
        try:
            accumulate(ddp, device, split(tensors, samples, parts), samples, per_sample_pixels, precision)
            break
        except torch.OutOfMemoryError:  # a real GPU: try smaller micro-batches
            parts *= 2
    _step(optimizer, precision)


def train_step(ddp, optimizer, device, tensors: dict, samples: int, padded_pixels: int,
               split_on_oom: bool, precision: StepPrecision | None = FP32) -> int:
    """One step on the batch; returns the OOM events handled (1 if it had to be split, else 0).

    An OutOfMemoryError raised in the forward pass leaves DDP clean (its reducer is prepared for backward
    only after forward returns), so the split's micro-batches may follow; the other ranks meanwhile wait in
    this step's gradient allreduce, which the last micro-batch joins."""
    optimizer.zero_grad(set_to_none=True)
    per_sample = padded_pixels // max(samples, 1)
    parts = micro_batches_needed(device, samples, per_sample)
    if parts == 1 or not split_on_oom:
        try:
            device.begin_step(samples, padded_pixels)
            loss = _forward(ddp, tensors, precision)
            _backward(loss, precision)
            _step(optimizer, precision)
            return 0
        except torch.OutOfMemoryError:
            if not split_on_oom:
                raise
            parts = 2
    _split_step(ddp, optimizer, device, tensors, samples, per_sample, parts, precision)
    return 1


def shadow_step(ddp, optimizer, device, tensors: dict, precision: StepPrecision | None = FP32) -> None:
    """A zero-weight step for a rank without data, so the others' gradient allreduce completes."""
    optimizer.zero_grad(set_to_none=True)
    device.begin_step(0, 0)
    _backward(_forward(ddp, tensors, precision) * 0.0, precision)
    _step(optimizer, precision)
