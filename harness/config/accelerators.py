"""The accelerator catalogue (scenarios/accelerators.toml) and its step-time and memory models.

`precision` is the catalogue rate a precision strategy selects: "amp" (the cited mixed-precision
rates; what every figure used before the precision axis existed) or "fp32" (the cited FP32/TF32
rates; fp32 activations take fp32_activation_factor times the bytes, an assumption stated in the
catalogue).
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

from harness.errors import UsageError

CATALOGUE = Path(__file__).resolve().parents[2] / "scenarios" / "accelerators.toml"
RESNET_PIXELS = 224 * 224
RATES = ("amp", "fp32")
DEFAULT_KEYS = ("step_overhead_s", "model_state_bytes", "activation_bytes_per_pixel",
                "activation_bytes_per_sample", "features_flops_per_sample", "flops_efficiency",
                "fp32_activation_factor")


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
    resnet50_fp32_img_per_s: float = 0.0  # 0: no fp32 figure (treated as the AMP rate)
    fp32_source: str = ""
    jpeg_decode_mpix_per_s: float = 1000.0  # device-side decode rate (an assumption, see the catalogue)
    fp32_activation_factor: float = 2.0

    def rate(self, precision: str = "amp") -> float:
        """ResNet-50 training images/s at this precision's catalogue rate."""
        if precision not in RATES:
            raise ValueError(f"precision rate must be one of {', '.join(RATES)}, got {precision!r}")
        if precision == "fp32" and self.resnet50_fp32_img_per_s:
            return self.resnet50_fp32_img_per_s
        return self.resnet50_img_per_s

    def step_seconds(self, workload: str, samples: int, padded_pixels: int, precision: str = "amp") -> float:
        """Modelled time of one training step on this accelerator."""
        rate = self.rate(precision)
        if workload == "pixels":
            return self.step_overhead_s + padded_pixels / (rate * RESNET_PIXELS)
        flops = self.features_flops_per_sample * samples
        slower = self.resnet50_img_per_s / rate  # the AMP/FP32 ratio (assumption for the features heads)
        return self.step_overhead_s + slower * flops / (self.fp16_tflops * 1e12 * self.flops_efficiency)

    def memory_needed(self, workload: str, samples: int, padded_pixels: int, precision: str = "amp") -> int:
        """Modelled peak device bytes of one training step."""
        factor = self.fp32_activation_factor if precision == "fp32" else 1.0
        if workload == "pixels":
            return int(self.model_state_bytes + factor * self.activation_bytes_per_pixel * padded_pixels)
        return int(self.model_state_bytes + factor * self.activation_bytes_per_sample * samples)

    def decode_seconds(self, source_pixels: int) -> float:
        """Modelled device time to decode, resize, flip and normalise JPEGs of `source_pixels`
        pixels."""
        return source_pixels / (self.jpeg_decode_mpix_per_s * 1e6)


ENTRY_KEYS = ("memory_gb", "resnet50_img_per_s", "fp16_tflops", "source", "resnet50_fp32_img_per_s",
              "fp32_source", "jpeg_decode_mpix_per_s")
REQUIRED_KEYS = ("memory_gb", "resnet50_img_per_s", "fp16_tflops")


def load_catalogue(path: Path = CATALOGUE, extra: dict[str, dict] | None = None) -> dict[str, Accelerator]:
    """The catalogue, plus a scenario's own `[accelerators.NAME]` tables (`extra`): the keys of a
    catalogue entry, and any of the [defaults] keys for that entry alone. A NAME the catalogue has
    is that entry with the given keys replaced; a new NAME needs memory_gb, resnet50_img_per_s and
    fp16_tflops."""
    with open(path, "rb") as f:
        data = tomllib.load(f)
    defaults = data.pop("defaults")
    for name, table in (extra or {}).items():
        data[name] = _merged(name, table, data.get(name), path)
    return {name: _entry(name, entry, defaults) for name, entry in data.items()}


def _merged(name: str, table: dict, base: dict | None, path: Path) -> dict:
    unknown = sorted(set(table) - set(ENTRY_KEYS) - set(DEFAULT_KEYS))
    if unknown:
        raise UsageError(f"[accelerators.{name}]: unknown key(s) {', '.join(unknown)}; the keys are those of "
                         f"{path.name}: {', '.join(ENTRY_KEYS + DEFAULT_KEYS)}")
    entry = {**(base or {}), **table}
    missing = [k for k in REQUIRED_KEYS if k not in entry]
    if missing:
        raise UsageError(f"[accelerators.{name}] is not in the catalogue, so it needs {', '.join(missing)}")
    for key, value in table.items():
        if key not in ("source", "fp32_source") and (not isinstance(value, int | float) or value < 0):
            raise UsageError(f"[accelerators.{name}] {key} = {value!r}: a number >= 0 is needed")
    entry.setdefault("source", "defined in the scenario's [accelerators." + name + "] table")
    return entry


def _entry(name: str, entry: dict, defaults: dict) -> Accelerator:
    return Accelerator(
        name=name,
        memory_bytes=int(entry["memory_gb"] * 1e9),
        resnet50_img_per_s=float(entry["resnet50_img_per_s"]),
        fp16_tflops=float(entry["fp16_tflops"]),
        source=entry["source"],
        resnet50_fp32_img_per_s=float(entry.get("resnet50_fp32_img_per_s", 0.0)),
        fp32_source=entry.get("fp32_source", ""),
        jpeg_decode_mpix_per_s=float(entry.get("jpeg_decode_mpix_per_s", 1000.0)),
        **{k: entry.get(k, defaults[k]) for k in DEFAULT_KEYS},
    )


def catalogue_match(gpu_name: str, catalogue: dict[str, Accelerator]) -> Accelerator | None:
    """The catalogue entry a real GPU's name matches ("NVIDIA H200" -> H200, "Tesla V100-SXM2-16GB"
    -> V100-16GB), or None."""
    flat = gpu_name.upper().replace(" ", "").replace("-", "")
    for name in sorted(catalogue, key=len, reverse=True):
        chip, _, mem = name.upper().partition("-")
        if chip in flat and (not mem or mem in flat):
            return catalogue[name]
    return None


def visible_accelerator() -> Accelerator:
    """`accelerator = "auto"`: the visible GPU's catalogue entry with its real name and memory; a
    GPU the catalogue lacks gets the A100-80GB's rates (an assumption, stated in its source).
    UsageError without one."""
    from dataclasses import replace

    from harness.measure import gpuinfo

    gpus = gpuinfo.visible_gpus()
    if not gpus:
        raise UsageError('accelerator = "auto" needs CUDA GPUs and none is visible here; run a scenario '
                         'that names its accelerator (e.g. 1xH200, 4xV100) to emulate one')
    catalogue = load_catalogue()
    base = catalogue_match(gpus[0]["name"], catalogue)
    source = f"matched catalogue entry {base.name}" if base else \
        "not in the catalogue: A100-80GB rates (assumption; the real GPU's time is measured anyway)"
    base = base or catalogue["A100-80GB"]
    return replace(base, name=gpus[0]["name"], memory_bytes=int(gpus[0]["memory_bytes"]),
                   source=f"{gpus[0]['name']}: {source}")


def get_accelerator(name: str, extra: dict[str, dict] | None = None) -> Accelerator:
    """The catalogue's entry `name` (with the scenario's own [accelerators.NAME] tables,
    `extra`)."""
    if name == "auto":
        return visible_accelerator()
    catalogue = load_catalogue(extra=extra)
    if name not in catalogue:
        raise UsageError(
            f"unknown accelerator {name!r} in [hardware] accelerator; known: {', '.join(catalogue)}, or auto")
    return catalogue[name]
