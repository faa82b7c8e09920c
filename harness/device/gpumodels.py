"""The workloads' models on a real GPU: ResNet-50 (bottleneck blocks [3, 4, 6, 3], random weights:
nothing is downloaded) as the image tower of a CLIP-style model with a small transformer text tower
over the caption tokens. Written in plain torch (no torchvision needed); the layout follows
torchvision's resnet50 (v1.5: the stride on the 3x3 convolution), so the trunk has the same 23.5 M
parameters."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from harness.data.fields import MAX_TOKENS, VOCAB_SIZE, normalise


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int = 1):
        super().__init__()
        out = planes * self.expansion
        self.conv1, self.bn1 = nn.Conv2d(inplanes, planes, 1, bias=False), nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3, self.bn3 = nn.Conv2d(planes, out, 1, bias=False), nn.BatchNorm2d(out)
        self.downsample = None
        if stride != 1 or inplanes != out:
            self.downsample = nn.Sequential(nn.Conv2d(inplanes, out, 1, stride=stride, bias=False),
                                            nn.BatchNorm2d(out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        y = F.relu(self.bn1(self.conv1(x)), inplace=True)
        y = F.relu(self.bn2(self.conv2(y)), inplace=True)
        return F.relu(self.bn3(self.conv3(y)) + identity, inplace=True)


class ResNet50(nn.Module):
    """The trunk: images [N, 3, H, W] -> features [N, 2048] (global average pool; no
    classifier)."""

    LAYERS = (3, 4, 6, 3)
    features = 2048

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False), nn.BatchNorm2d(64),
                                  nn.ReLU(inplace=True), nn.MaxPool2d(3, stride=2, padding=1))
        stages, inplanes = [], 64
        for i, (blocks, planes) in enumerate(zip(self.LAYERS, (64, 128, 256, 512))):
            layer = [Bottleneck(inplanes, planes, stride=1 if i == 0 else 2)]
            inplanes = planes * Bottleneck.expansion
            layer += [Bottleneck(inplanes, planes) for _ in range(blocks - 1)]
            stages.append(nn.Sequential(*layer))
        self.stages = nn.Sequential(*stages)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.flatten(F.adaptive_avg_pool2d(self.stages(self.stem(x)), 1), 1)


class TextTransformer(nn.Module):
    """Token embeddings + positions, a small pre-norm transformer encoder, mean over the real
    tokens."""

    def __init__(self, width: int = 256, layers: int = 2, heads: int = 4):
        super().__init__()
        self.embed = nn.Embedding(VOCAB_SIZE, width, padding_idx=0)
        self.pos = nn.Parameter(torch.zeros(MAX_TOKENS, width))
        layer = nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0, batch_first=True,
                                           norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.encoder(self.embed(tokens) + self.pos[: tokens.shape[1]])
        real = (tokens != 0).unsqueeze(-1).to(x.dtype)
        return (x * real).sum(1) / real.sum(1).clamp(min=1.0)


class CLIPResNet(nn.Module):
    """ResNet-50 image tower + transformer text tower, projected to a shared space (CLIP's
    recipe)."""

    name = "CLIP (ResNet-50 + 2-layer text transformer)"

    def __init__(self, embed: int = 512, channels_last: bool = False):
        super().__init__()
        self.channels_last = channels_last
        self.image, self.text = ResNet50(), TextTransformer()
        self.image_proj = nn.Linear(ResNet50.features, embed)
        self.text_proj = nn.Linear(256, embed)
        self.logit_scale = nn.Parameter(torch.tensor(2.659))  # log(1/0.07), as CLIP

    def forward(self, batch: dict) -> torch.Tensor:
        images = normalise(batch["images"])
        if self.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        img = F.normalize(self.image_proj(self.image(images)), dim=-1)
        txt = F.normalize(self.text_proj(self.text(batch["tokens"])), dim=-1)
        logits = self.logit_scale.exp() * img.float() @ txt.float().t()
        target = torch.arange(len(logits), device=logits.device)
        return (F.cross_entropy(logits, target) + F.cross_entropy(logits.t(), target)) / 2
