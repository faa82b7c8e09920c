"""A small image/text two-tower model with a CLIP-style contrastive loss, and which model a cell trains.

Small on purpose: on an emulated accelerator the real CPU step must fit inside the modelled step time. On a
real GPU the pixels workload trains harness.device.gpumodels.CLIPResNet (ResNet-50 + a text transformer); the features
workload keeps the two-tower projections on the 2048/768-d embeddings everywhere.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from harness.data.fields import VOCAB_SIZE

EMBED = 128


class PixelTower(nn.Module):
    """The image, subsampled to at most ~32x32 and pooled to 8x8 x 3 channels, then one linear layer.

    Every pixel of the batch crossed the loader and the host-to-device copy; the tower reads a strided
    subset so that its host cost stays near a millisecond whatever the image size."""

    GRID = 8

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(3 * self.GRID * self.GRID, EMBED)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        stride = max(1, min(images.shape[-2:]) // (4 * self.GRID))
        x = images[:, :, ::stride, ::stride].float()
        x = F.adaptive_avg_pool2d(x, self.GRID).flatten(1).div_(255.0)
        return self.proj(x)


class TokenTower(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.EmbeddingBag(VOCAB_SIZE, 64, mode="mean", padding_idx=0)
        self.proj = nn.Linear(64, EMBED)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.proj(self.embed(tokens))


def _projection(dim: int, embed: int = EMBED) -> nn.Module:
    return nn.Linear(dim, embed)


class StridedProjection(nn.Module):
    """Every `stride`-th dimension of the embedding, projected: the emulated stand-in's features tower. The
    whole embedding crossed the loader and the copy; the rank's real step (forward, backward, the gradient
    allreduce of ~5 k parameters instead of 360 k) stays a fraction of a millisecond, so that the harness's
    own host work per step does not eat the modelled step it stands in for."""

    def __init__(self, dim: int, stride: int, embed: int):
        super().__init__()
        self.stride = stride
        self.proj = nn.Linear(len(range(0, dim, stride)), embed)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x[:, ::self.stride])


STANDIN_EMBED = 32  # the emulated features stand-in's width


class TwoTower(nn.Module):
    def __init__(self, workload: str, name: str = "", cheap: bool = False):
        super().__init__()
        self.workload = workload
        self.name = name or ("stand-in two-tower (8x8 pooled pixels, token bag)" if workload == "pixels"
                             else "two-tower projections (2048/768-d embeddings)")
        if workload == "pixels":
            self.image, self.text = PixelTower(), TokenTower()
        elif cheap:
            self.image = StridedProjection(2048, 16, STANDIN_EMBED)
            self.text = StridedProjection(768, 8, STANDIN_EMBED)
        else:
            self.image, self.text = _projection(2048), _projection(768)
        self.logit_scale = nn.Parameter(torch.tensor(2.659))  # log(1/0.07), as CLIP

    def forward(self, batch: dict) -> torch.Tensor:
        if self.workload == "pixels":
            img, txt = self.image(batch["images"]), self.text(batch["tokens"])
        else:
            img, txt = self.image(batch["image_emb"]), self.text(batch["text_emb"])
        img, txt = F.normalize(img, dim=-1), F.normalize(txt, dim=-1)
        logits = self.logit_scale.exp() * img @ txt.t()
        target = torch.arange(len(logits), device=logits.device)
        return (F.cross_entropy(logits, target) + F.cross_entropy(logits.t(), target)) / 2


def build_model(workload: str, cuda: bool) -> nn.Module:
    """The model a cell trains; its `name` goes into the rank record. Emulated: the cheap stand-in (its
    modelled step time is the catalogue's ResNet-50 rate). CUDA: ResNet-50 CLIP for pixels, channels_last."""
    if not cuda:
        label = "stand-in two-tower, emulated (8x8 pooled pixels, token bag)" if workload == "pixels" else \
            "stand-in two-tower, emulated (strided 2048/768-d projections)"
        return TwoTower(workload, name=label, cheap=True)
    if workload == "pixels":
        from harness.device.gpumodels import CLIPResNet

        return CLIPResNet(channels_last=True).to(memory_format=torch.channels_last)
    return TwoTower(workload)
