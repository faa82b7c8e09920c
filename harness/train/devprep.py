"""Device preprocessing (preprocess = "device"): the loader hands over JPEG bytes; here, on the
rank, the batch's pixel counts are filled in (from the known resized shapes, no decoding) and,
inside the device-timed part of the step, the images are made on the device.

CUDA: torchvision.io.decode_jpeg on the GPU (batched, nvJPEG), then resize (bilinear, antialiased,
longest side image_size), random horizontal flip and normalisation, padded into one float batch.
Emulated: the decode is MODELLED device time (the catalogue's jpeg_decode_mpix_per_s of the
full-resolution source pixels, an assumption stated there); the stand-in model sees a blank uint8
batch of the padded shape.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from harness.data.fields import normalise


class DevicePrep:
    def __init__(self, resized: np.ndarray, sides: np.ndarray, flip: bool):
        self.resized = resized  # int64[N, 2] (h, w) after resize, index-aligned
        self.source = (sides[:, 0].astype(np.int64) * sides[:, 1]).astype(np.int64)  # source pixels
        self.flip = flip

    def annotate(self, batch: dict) -> dict:
        """padded_pixels, real_pixels and source_pixels of a batch of JPEG bytes (cheap, on the
        rank)."""
        idx = batch["index"].numpy()
        hw = self.resized[idx]
        batch["shape"] = (int(hw[:, 0].max()), int(hw[:, 1].max()))
        batch["padded_pixels"] = len(idx) * batch["shape"][0] * batch["shape"][1]
        batch["real_pixels"] = int((hw[:, 0] * hw[:, 1]).sum())
        batch["source_pixels"] = int(self.source[idx].sum())
        return batch

    def images(self, batch: dict, device) -> torch.Tensor:
        """The batch's images on the device (call inside the device-timed part of the step)."""
        if device.emulated:
            device.add_preprocess(batch["source_pixels"])
            return torch.zeros((len(batch["jpegs"]), 3, *batch["shape"]), dtype=torch.uint8)
        return self._decode_cuda(batch, device.torch_device)

    def _decode_cuda(self, batch: dict, where: torch.device) -> torch.Tensor:
        from torchvision.io import ImageReadMode, decode_jpeg  # only on CUDA, checked by the strategy

        decoded = decode_jpeg(batch["jpegs"], mode=ImageReadMode.RGB, device=where)
        out = torch.zeros((len(decoded), 3, *batch["shape"]), dtype=torch.float32, device=where)
        hw = self.resized[batch["index"].numpy()]
        flips = torch.rand(len(decoded)) < 0.5 if self.flip else torch.zeros(len(decoded), dtype=torch.bool)
        for i, img in enumerate(decoded):
            h, w = int(hw[i, 0]), int(hw[i, 1])
            small = F.interpolate(img[None].float(), size=(h, w), mode="bilinear", antialias=True,
                                  align_corners=False)[0]
            out[i, :, :h, :w] = small.flip(-1) if flips[i] else small
        return normalise(out.clamp_(0, 255).round_().to(torch.uint8))
