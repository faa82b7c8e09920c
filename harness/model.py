"""A small image/text two-tower model with a CLIP-style contrastive loss.

Small on purpose: on an emulated accelerator the real CPU step must fit inside the modelled step time.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from harness.items import VOCAB_SIZE

EMBED = 128


class PixelTower(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 16, kernel_size=8, stride=8), nn.ReLU(),
            nn.Conv2d(16, 32, kernel_size=3, stride=2, padding=1), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.proj = nn.Linear(32, EMBED)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.proj(self.stem(images.float().div_(255.0)))


class TokenTower(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.EmbeddingBag(VOCAB_SIZE, 64, mode="mean", padding_idx=0)
        self.proj = nn.Linear(64, EMBED)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.proj(self.embed(tokens))


def _mlp(dim: int) -> nn.Module:
    return nn.Sequential(nn.Linear(dim, 256), nn.ReLU(), nn.Linear(256, EMBED))


class TwoTower(nn.Module):
    def __init__(self, workload: str):
        super().__init__()
        self.workload = workload
        if workload == "pixels":
            self.image, self.text = PixelTower(), TokenTower()
        else:
            self.image, self.text = _mlp(2048), _mlp(768)
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
