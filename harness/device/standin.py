"""A small image/text two-tower model with a CLIP-style contrastive loss, the emulated features
stand-in, and which model a cell trains.

Small on purpose: on an emulated accelerator the real CPU step must fit inside the modelled step
time: the pixels workload trains the pooled two-tower, the features workload one linear layer on
strided embeddings (StridedFeatures). On a real GPU the pixels workload trains
harness.device.gpumodels.CLIPResNet (ResNet-50 + a text transformer) and the features workload the
two-tower projections on the 2048/768-d embeddings.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from harness.data.fields import VOCAB_SIZE

EMBED = 128


class PixelTower(nn.Module):
    """The image, subsampled to at most ~32x32 and pooled to 8x8 x 3 channels, then one linear
    layer.

    Every pixel of the batch crossed the loader and the host-to-device copy; the tower reads a
    strided subset so that its host cost stays near a millisecond whatever the image size."""

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


class StridedFeatures(nn.Module):
    """The emulated stand-in of the features workload: every 16th dimension of the image embedding
    and every 8th of the text embedding, one linear layer to one output, its mean square as the
    loss. The whole embeddings crossed the loader and the copy; the rank's real step (forward,
    backward, DDP's gradient allreduce of 225 parameters, the optimizer step) costs about 0.17 ms
    of CPU on one core where the two-tower projections with a contrastive loss cost 0.56 ms, so
    that the harness's own host work per step does not eat the modelled step it stands in for
    (docs/dlio.md)."""

    STRIDES = (16, 8)  # image, text

    def __init__(self, name: str = ""):
        super().__init__()
        self.workload, self.name = "features", name or "stand-in, emulated (strided 2048/768-d features)"
        self.proj = nn.Linear(len(range(0, 2048, self.STRIDES[0])) + len(range(0, 768, self.STRIDES[1])), 1)

    def forward(self, batch: dict) -> torch.Tensor:
        x = torch.cat((batch["image_emb"][:, ::self.STRIDES[0]], batch["text_emb"][:, ::self.STRIDES[1]]), 1)
        return self.proj(x.float()).square().mean()


class TwoTower(nn.Module):
    def __init__(self, workload: str, name: str = ""):
        super().__init__()
        self.workload = workload
        self.name = name or ("stand-in two-tower (8x8 pooled pixels, token bag)" if workload == "pixels"
                             else "two-tower projections (2048/768-d embeddings)")
        if workload == "pixels":
            self.image, self.text = PixelTower(), TokenTower()
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
    """The model a cell trains; its `name` goes into the rank record. Emulated: the cheap stand-in
    (its modelled step time is the catalogue's ResNet-50 rate). CUDA: ResNet-50 CLIP for pixels,
    channels_last."""
    if not cuda:
        if workload == "pixels":
            return TwoTower(workload, name="stand-in two-tower, emulated (8x8 pooled pixels, token bag)")
        return StridedFeatures()
    if workload == "pixels":
        from harness.device.gpumodels import CLIPResNet

        return CLIPResNet(channels_last=True).to(memory_format=torch.channels_last)
    return TwoTower(workload)
