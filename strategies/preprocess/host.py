"""host: the loader (workers or threads) decodes, resizes and flips each image; ``normalise =
true`` also normalises it there into float32 (4x the bytes of uint8 across the loader and the
host-to-device copy); by default the uint8 batch crosses and the model's first operation scales it
on the device."""
from __future__ import annotations

from strategies.params import flag
from strategies.protocols import PreprocessBase
from strategies.registry import register


@register("preprocess", "host")
class HostPreprocess(PreprocessBase):
    where = "host"

    def __init__(self, flip: bool = True, normalise: bool = False) -> None:
        self.flip, self.normalise = flag("flip", flip), flag("normalise", normalise)
