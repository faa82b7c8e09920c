"""fp32: no autocast. On Ampere and later the matmuls and convolutions may use TF32 tensor cores
(``tf32``, on by default as in NVIDIA's TF32 ResNet-50 figures); the emulated step uses the
catalogue's FP32/TF32 rate."""
from __future__ import annotations

from strategies.params import flag
from strategies.protocols import PrecisionBase
from strategies.registry import register


@register("precision", "fp32")
class FP32(PrecisionBase):
    rate = "fp32"

    def __init__(self, tf32: bool = True) -> None:
        self.tf32 = flag("tf32", tf32)
