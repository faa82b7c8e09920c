"""What the two workloads read of a sample and how its text and pixels become model inputs: the
fields per workload, the hashed vocabulary of the captions, and the ImageNet normalisation of the
images."""
from __future__ import annotations

import zlib

import torch

VOCAB_SIZE = 4096
MAX_TOKENS = 48
FIELDS_FOR = {"pixels": ("jpeg", "caption"), "features": ("image_emb", "text_emb")}


def tokenize(caption: str) -> list[int]:
    """Words hashed into a fixed vocabulary (stable across processes, unlike hash())."""
    return [zlib.crc32(w.encode()) % (VOCAB_SIZE - 1) + 1 for w in caption.split()[:MAX_TOKENS]]


MEAN = (0.485, 0.456, 0.406)  # ImageNet statistics, as torchvision's normalisation
STD = (0.229, 0.224, 0.225)


def normalise(images: torch.Tensor) -> torch.Tensor:
    """uint8 [N, 3, H, W] -> float32 normalised; a float input is taken as normalised already."""
    if images.dtype != torch.uint8:
        return images
    mean, std = _constants(images.device)
    return (images.float() - mean) / std


_CONSTANTS: dict = {}


def _constants(where: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """MEAN and STD x 255 as [1, 3, 1, 1] tensors on `where`, made once per device: building them
    on every call was two blocking host-to-device copies per forward on a GPU."""
    if where not in _CONSTANTS:
        _CONSTANTS[where] = (torch.tensor(MEAN, device=where).view(1, 3, 1, 1) * 255,
                             torch.tensor(STD, device=where).view(1, 3, 1, 1) * 255)
    return _CONSTANTS[where]
