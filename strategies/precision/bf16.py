"""bf16: bfloat16 autocast, no gradient scaler (bfloat16 has fp32's exponent range). Runs where the
device supports bfloat16 (Ampere and later); the emulated step uses the AMP rate (an assumption:
the catalogue has no bfloat16 figure)."""
from __future__ import annotations

from strategies.protocols import PrecisionBase
from strategies.registry import register


@register("precision", "bf16")
class BF16(PrecisionBase):
    autocast_dtype = "bfloat16"
    grad_scaler = False
    rate = "amp"
