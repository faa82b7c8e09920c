"""device: the loader only reads the JPEG bytes; decode, resize, flip and normalise run on the
accelerator (batched nvJPEG decode on a GPU; modelled device time on an emulated one)."""
from __future__ import annotations

import importlib.util

import torch

from strategies.params import flag
from strategies.protocols import PreprocessBase
from strategies.registry import register


@register("preprocess", "device")
class DevicePreprocess(PreprocessBase):
    where = "device"
    normalise = True  # always on the device

    def __init__(self, flip: bool = True) -> None:
        self.flip = flag("flip", flip)
        if torch.cuda.is_available() and importlib.util.find_spec("torchvision") is None:
            raise ValueError("device preprocessing on a GPU decodes with torchvision.io.decode_jpeg; "
                             "install torchvision (pip install -e .[gpu]) or drop preprocess = device")
