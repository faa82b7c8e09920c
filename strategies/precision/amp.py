"""amp: automatic mixed precision, float16 autocast with a gradient scaler (the catalogue's AMP
rates)."""
from __future__ import annotations

from strategies.protocols import PrecisionBase
from strategies.registry import register


@register("precision", "amp")
class AMP(PrecisionBase):
    autocast_dtype = "float16"
    grad_scaler = True
    rate = "amp"
