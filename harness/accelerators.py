"""The accelerator catalogue (scenarios/accelerators.toml) and its step-time and memory models."""
from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

from harness.errors import UsageError

CATALOGUE = Path(__file__).resolve().parent.parent / "scenarios" / "accelerators.toml"
RESNET_PIXELS = 224 * 224


@dataclass(frozen=True)
class Accelerator:
    name: str
    memory_bytes: int
    resnet50_img_per_s: float
    fp16_tflops: float
    source: str
    step_overhead_s: float
    model_state_bytes: int
    activation_bytes_per_pixel: float
    activation_bytes_per_sample: float
    features_flops_per_sample: float
    flops_efficiency: float

    def step_seconds(self, workload: str, samples: int, padded_pixels: int) -> float:
        """Modelled time of one training step on this accelerator."""
        if workload == "pixels":
            return self.step_overhead_s + padded_pixels / (self.resnet50_img_per_s * RESNET_PIXELS)
        flops = self.features_flops_per_sample * samples
        return self.step_overhead_s + flops / (self.fp16_tflops * 1e12 * self.flops_efficiency)

    def memory_needed(self, workload: str, samples: int, padded_pixels: int) -> int:
        """Modelled peak device bytes of one training step."""
        if workload == "pixels":
            return int(self.model_state_bytes + self.activation_bytes_per_pixel * padded_pixels)
        return int(self.model_state_bytes + self.activation_bytes_per_sample * samples)


def load_catalogue(path: Path = CATALOGUE) -> dict[str, Accelerator]:
    with open(path, "rb") as f:
        data = tomllib.load(f)
    defaults = data.pop("defaults")
    return {
        name: Accelerator(
            name=name,
            memory_bytes=int(entry["memory_gb"] * 1e9),
            resnet50_img_per_s=float(entry["resnet50_img_per_s"]),
            fp16_tflops=float(entry["fp16_tflops"]),
            source=entry["source"],
            **{k: defaults[k] for k in (
                "step_overhead_s", "model_state_bytes", "activation_bytes_per_pixel",
                "activation_bytes_per_sample", "features_flops_per_sample", "flops_efficiency")},
        )
        for name, entry in data.items()
    }


def get_accelerator(name: str) -> Accelerator:
    catalogue = load_catalogue()
    if name not in catalogue:
        raise UsageError(
            f"unknown accelerator {name!r} in [hardware] accelerator; known: {', '.join(catalogue)}")
    return catalogue[name]
