"""Pure: the configuration to use on a target, per cell, with its predicted effect
(harness.analysis.targetmodel): workers per rank, prefetch, decoder, host or device preprocessing,
and what limits next.

- workers: the fewest that make the device bind (targetmodel.workers_for_device); when no number
  does, the number past which the prediction no longer rises (at most the node's cores per rank).
- prefetch: enough batches in flight per worker to cover a cold read's wait for one batch while the
  device computes one (at least 2, the DataLoader's default). The model predicts the steady state,
  which prefetch does not change; it hides the wait's variation.
- decoder: a faster decoder when the decode is at least a third of the loader and the loader binds;
  `decode_ratio` (the other decoder's cost over this one's, measured: the check command,
  --loader-only) gives its predicted effect.
- preprocessing: "device" when the loader still binds with the recommended workers and decode +
  transform are at least half of the loader: predicted with those stages off the host and the
  accelerator's decode time (the catalogue's jpeg_decode_mpix_per_s, `source_pixels_per_sample`
  when known) added to the step. That rate is an assumption of the catalogue, never measured by a
  run: where the device time is a real GPU's (measured), the advice says the decode on it is
  assumed (targetmodel.assumed_decode).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from harness.analysis.targetmodel import Costs, assumed_decode, device_seconds, io_seconds, predict
from harness.config.accelerators import Accelerator
from harness.config.target import Target

LOADER_BINDS = ("loader workers", "loader CPU")


@dataclass(frozen=True)
class Recommendation:
    workers: int
    prefetch: int
    decoder: str  # "keep" or the advice
    preprocess: str  # "host" or "device"
    samples_per_s: float  # predicted with the recommendation
    au_pct: float
    now_samples_per_s: float  # predicted with the target's own settings
    next_limit: str  # what binds with the recommendation
    notes: tuple[str, ...] = ()
    workers_capped: bool = False  # no number of workers makes the device bind: more do not help
    path_pct: float = 0.0  # where the device binds: % of its step the path beside it takes (Prediction)
    imbalance_pct: float = 0.0  # and the wait for the slowest rank

    def text(self) -> str:
        gain = self.samples_per_s / self.now_samples_per_s if self.now_samples_per_s else math.inf
        parts = [f"workers {self.workers}", f"prefetch {self.prefetch}", f"preprocess {self.preprocess}"]
        if self.decoder != "keep":
            parts.append(self.decoder)
        notes = f" ({'; '.join(self.notes)})" if self.notes else ""
        return (f"{', '.join(parts)}: {self.samples_per_s:.0f} samples/s (x{gain:.2f}), AU {self.au_pct:.0f}%, "
                f"then {self.next_limit} binds{notes}")


def _best_workers(costs: Costs, target: Target, accelerator: Accelerator) -> int:
    most = max(1, int(target.cores_per_node // target.gpus_per_node))
    best, rate = 1, -1.0
    for workers in range(1, most + 1):
        p = predict(costs, replace(target, workers_per_rank=workers), accelerator, advise=False)
        if p.samples_per_s > rate * 1.01:
            best, rate = workers, p.samples_per_s
        if p.binds == "device":
            break
    return best


def _prefetch(costs: Costs, target: Target, accelerator: Accelerator) -> int:
    step = device_seconds(costs, accelerator, target.batch_size) * target.batch_size
    wait = io_seconds(costs, target) * target.batch_size
    return max(2, math.ceil(wait / step) + 1) if step > 0 else 2


def on_device(costs: Costs, accelerator: Accelerator, source_pixels_per_sample: float = 0.0) -> Costs:
    """The costs with the decode and the transforms moved to the accelerator (the rank's device
    time per sample grows by the modelled decode of `source_pixels_per_sample`; without it, of the
    decoded pixels, a lower bound: a source image is at least as large as what is decoded from
    it)."""
    stages = {k: (0.0 if k in ("decode", "transform") else v) for k, v in costs.stages.items()}
    pixels = source_pixels_per_sample or costs.padded_pixels_per_sample or 0.0
    extra = accelerator.decode_seconds(int(pixels)) if pixels else 0.0
    return replace(costs, loader_s=sum(stages.values()), stages=stages,
                   device_extra_s=costs.device_extra_s + extra)


def recommend(costs: Costs, target: Target, accelerator: Accelerator, decode_ratio: float | None = None,
              source_pixels_per_sample: float = 0.0) -> Recommendation:
    now = predict(costs, target, accelerator, advise=False)
    for_device = predict(costs, target, accelerator).workers_for_device
    workers = for_device or _best_workers(costs, target, accelerator)
    workers = min(workers, max(1, int(target.cores_per_node // target.gpus_per_node)))
    best = replace(target, workers_per_rank=workers, prefetch=_prefetch(costs, target, accelerator))
    chosen, notes, decoder, preprocess = costs, [], "keep", "host"
    p = predict(chosen, best, accelerator, advise=False)
    loader = costs.loader_s or 1e-12
    decode_share = costs.stages.get("decode", 0.0) / loader
    if p.binds in LOADER_BINDS and decode_share >= 1 / 3:
        decoder = "a faster decoder"
        if decode_ratio is not None and decode_ratio < 1:
            stages = dict(costs.stages, decode=costs.stages["decode"] * decode_ratio)
            trial = replace(costs, stages=stages, loader_s=sum(stages.values()))
            if predict(trial, best, accelerator, advise=False).samples_per_s > p.samples_per_s:
                chosen, decoder = trial, f"the other decoder (decode x{decode_ratio:.2f})"
                p = predict(chosen, best, accelerator, advise=False)
    prep_share = (costs.stages.get("decode", 0.0) + costs.stages.get("transform", 0.0)) / loader
    if p.binds in LOADER_BINDS and prep_share >= 0.5:
        trial = on_device(costs, accelerator, source_pixels_per_sample)
        q = predict(trial, best, accelerator, advise=False)
        if q.samples_per_s > p.samples_per_s:
            chosen, preprocess, decoder, p = trial, "device", "keep", q
            if assumed_decode(trial):
                notes.append(f"the device's decode at the catalogue's assumed {accelerator.jpeg_decode_mpix_per_s:.0f} "
                             f"Mpix/s for {accelerator.name}, not measured on this GPU")
            if not source_pixels_per_sample:
                notes.append("the device's decode costed at the decoded size, a lower bound: the source "
                             "images' size is unknown here" if costs.padded_pixels_per_sample else
                             "the device's decode not costed: no pixel count")
    return Recommendation(workers, best.prefetch, decoder, preprocess, p.samples_per_s, p.au_pct,
                          now.samples_per_s, p.binds, tuple(notes), workers_capped=for_device is None,
                          path_pct=p.path_pct, imbalance_pct=p.imbalance_pct)
