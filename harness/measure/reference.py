"""Fixed reference work a rank times in the same visit as its measured window, so that a gate can
divide a cell's CPU costs by what the load of that minute did to work that never changes
(docs/ci-gate.md, "The gate's figures").

On a shared machine the CPU a piece of code costs moves with the other processes on the same cores
(caches, the SMT sibling, memory bandwidth): by tens of percent between runs of unchanged code. A
figure divided by the same kind of work, timed by the same kind of clock in the same minute, keeps
what the code changed and drops most of what the load changed. Two pieces, neither of them code a
strategy or the harness's pipeline runs, so that a change to that code moves the figure and is not
divided away:

- `decode`: the JPEG library's work of the decode stage, called directly: PIL opens one fixed JPEG
  (made once per process from a seeded pattern, REFERENCE_SIDES), decodes it in draft mode and
  resizes it bilinearly to a longest side of 96, DECODES times. The pixels workload's decode stage
  (harness.data.decoders.decode_resize) does the same kind of work on the dataset's images through
  the harness's code.
- `rank`: a rank's kind of host work: the forward, backward and SGD step of a fixed small model (a
  linear layer on pooled pixels and an embedding bag, the stand-in's shape, harness.device.standin)
  on a fixed batch, STEPS times, with autograd and the dispatcher's per-op cost as in a rank's
  step.

Each is read from the calling thread's own CPU clock (time.thread_time): what the same instructions
cost now, not how long the thread waited for a core. `measure()` costs about 12 ms of one core; a
rank takes it twice a visit, right after its window's clocks are read (harness.train.measuredloop),
outside every figure of the window and never before it. Changing this work changes every figure
divided by it, as a change of the code under test would: bump REFERENCE_VERSION (each rank record
carries it) and regenerate the committed baseline in the same commit.
"""
from __future__ import annotations

import io
import time
from functools import lru_cache

import numpy as np
import torch
from PIL import Image
from torch import nn

REFERENCE_VERSION = 1  # bump on any change of the work below (module docstring)
REFERENCE_SIDES = (240, 320)  # the fixed JPEG's height and width
TARGET = (96, 72)  # its size after the resize (width, height): longest side 96, aspect kept
DECODES = 8
STEPS = 12
BATCH = 16


@lru_cache(maxsize=1)
def reference_jpeg() -> bytes:
    """The fixed JPEG: smooth gradients and seeded noise (a photo's mix of flat and busy blocks),
    quality 90."""
    h, w = REFERENCE_SIDES
    rng = np.random.default_rng(20261203)
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([x * 255 // w, y * 255 // h, (x + y) * 255 // (w + h)], axis=-1)
    pixels = np.clip(base + rng.normal(0, 24, (h, w, 3)), 0, 255).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="JPEG", quality=90)
    return out.getvalue()


def decode_once(jpeg: bytes) -> np.ndarray:
    img = Image.open(io.BytesIO(jpeg))
    img.draft("RGB", TARGET)
    return np.asarray(img.convert("RGB").resize(TARGET, Image.BILINEAR))


class ReferenceModel(nn.Module):
    """The rank's reference work: pooled pixels through one linear layer, tokens through an
    embedding bag."""

    def __init__(self):
        super().__init__()
        gen = torch.Generator().manual_seed(0)
        self.proj = nn.Linear(3 * 8 * 8, 64)
        self.embed = nn.EmbeddingBag(1000, 64, mode="mean")
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=gen) * 0.05)

    def forward(self, images: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        x = nn.functional.adaptive_avg_pool2d(images, 8).flatten(1)
        return (self.proj(x) * self.embed(tokens)).sum(dim=1).square().mean()


@lru_cache(maxsize=1)
def _rank_work() -> tuple[ReferenceModel, torch.optim.Optimizer, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    model = ReferenceModel()
    images = torch.rand((BATCH, 3, 32, 32), generator=gen)
    tokens = torch.randint(0, 1000, (BATCH, 16), generator=gen)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    _steps(model, optimizer, images, tokens, 2)  # untimed: the first steps allocate autograd's buffers
    return model, optimizer, images, tokens


def _steps(model, optimizer, images, tokens, n: int) -> None:
    for _ in range(n):
        optimizer.zero_grad(set_to_none=True)
        model(images, tokens).backward()
        optimizer.step()


def decode_s() -> float:
    """Thread CPU seconds of one reference decode (the mean over DECODES)."""
    jpeg = reference_jpeg()
    start = time.thread_time()
    for _ in range(DECODES):
        decode_once(jpeg)
    return (time.thread_time() - start) / DECODES


def rank_s() -> float:
    """Thread CPU seconds of one reference step (the mean over STEPS)."""
    work = _rank_work()
    start = time.thread_time()
    _steps(*work, STEPS)
    return (time.thread_time() - start) / STEPS


def measure() -> dict[str, float]:
    """One reading of both pieces: {"decode_s": s per decode, "rank_s": s per step}."""
    return {"decode_s": decode_s(), "rank_s": rank_s()}


def combine(readings: list[dict[str, float]]) -> dict | None:
    """A visit's readings as one record (the rank record's `reference`): each piece's mean over the
    readings, their count and REFERENCE_VERSION; None without a reading."""
    if not readings:
        return None
    return {"decode_s": round(float(np.mean([r["decode_s"] for r in readings])), 9),
            "rank_s": round(float(np.mean([r["rank_s"] for r in readings])), 9),
            "readings": len(readings), "version": REFERENCE_VERSION}
