"""The GPU workloads' models, checked on the CPU with tiny inputs; the `gpu` scenario without a GPU."""
from __future__ import annotations

import pytest
import torch

from harness.config import scenario
from harness.device.gpumodels import CLIPResNet, ResNet50
from harness.device.standin import build_model
from harness.errors import UsageError


def test_resnet50_trunk_has_torchvisions_parameter_count_and_2048_features():
    net = ResNet50()
    n = sum(p.numel() for p in net.parameters())
    assert n == 23_508_032  # torchvision's resnet50 without its 2048x1000 classifier (25,557,032 - 2,049,000)
    with torch.no_grad():
        out = net.eval()(torch.zeros(2, 3, 32, 40))
    assert out.shape == (2, 2048)


def test_clip_model_trains_one_step_on_uint8_images():
    torch.manual_seed(0)
    model = CLIPResNet(embed=32)
    batch = {"images": torch.randint(0, 255, (2, 3, 32, 32), dtype=torch.uint8),
             "tokens": torch.tensor([[5, 6, 0], [7, 0, 0]])}
    loss = model(batch)
    loss.backward()
    assert torch.isfinite(loss) and model.image.stem[0].weight.grad is not None


def test_emulated_device_keeps_the_cheap_stand_in():
    assert build_model("pixels", cuda=False).name.startswith("stand-in")
    assert build_model("features", cuda=False).name.startswith("stand-in")


def test_the_emulated_features_stand_in_trains_on_both_embeddings_with_few_parameters():
    """Every parameter gets a gradient (DDP is built without find_unused_parameters), the loss reads both
    embeddings (both crossed the loader), and the allreduce it makes is small: a few hundred parameters."""
    torch.manual_seed(0)
    model = build_model("features", cuda=False)
    assert sum(p.numel() for p in model.parameters()) <= 1000
    batch = {"image_emb": torch.randn(4, 2048), "text_emb": torch.randn(4, 768)}
    model(batch).backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())
    with torch.no_grad():
        base = model(batch)
        for key in ("image_emb", "text_emb"):
            assert model({**batch, key: batch[key] + 1.0}) != base, key


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only answer")
def test_gpu_scenario_needs_gpus():
    with pytest.raises(UsageError, match="none is visible"):
        scenario.load("gpu")
