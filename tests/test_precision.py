"""The precision axis: cited FP32/TF32 rates beside the AMP ones, the modelled memory, what the emulated
device and the training step do with each precision on a CPU."""
from __future__ import annotations

import pytest
import torch

from harness.config.accelerators import get_accelerator, load_catalogue
from harness.device.devices import EmulatedDevice
from harness.train.ddpstep import StepPrecision
from strategies import registry

CITED = {"V100-16GB": (367, 1200), "V100-32GB": (356, 1156), "A100-80GB": (938, 2470)}


@pytest.mark.parametrize("name", sorted(CITED))
def test_catalogue_has_the_cited_fp32_and_amp_rates(name):
    acc = load_catalogue()[name]
    assert (acc.rate("fp32"), acc.rate("amp")) == CITED[name]
    assert "DeepLearningExamples" in acc.fp32_source


def test_h100_h200_fp32_rates_are_labelled_assumptions():
    for name in ("H100-80GB", "H200"):
        assert "assumption" in load_catalogue()[name].fp32_source


def test_step_time_and_memory_follow_the_precision():
    v100 = get_accelerator("V100-16GB")
    px = 64 * 224 * 224
    fp32, amp = v100.step_seconds("pixels", 64, px, "fp32"), v100.step_seconds("pixels", 64, px, "amp")
    assert 64 / (fp32 - v100.step_overhead_s) == pytest.approx(367)
    assert 64 / (amp - v100.step_overhead_s) == pytest.approx(1200)
    assert v100.step_seconds("pixels", 64, px) == amp  # the default is AMP: older figures unchanged
    extra = v100.memory_needed("pixels", 64, px, "fp32") - v100.model_state_bytes
    assert extra == pytest.approx(2 * (v100.memory_needed("pixels", 64, px) - v100.model_state_bytes))
    assert v100.step_seconds("features", 64, 0, "fp32") > v100.step_seconds("features", 64, 0, "amp")


def test_emulated_device_models_the_configured_precision_and_device_decode():
    dev = EmulatedDevice(get_accelerator("V100-16GB"), "pixels")
    px = 32 * 160 * 160
    amp = dev.begin_step(32, px)
    dev.configure("fp32", "device")
    dev.add_preprocess(10_000_000)
    fp32 = dev.begin_step(32, px)
    decode = get_accelerator("V100-16GB").decode_seconds(10_000_000)
    assert fp32 == pytest.approx(get_accelerator("V100-16GB").step_seconds("pixels", 32, px, "fp32") + decode)
    assert fp32 > amp and dev.begin_step(32, px) < fp32  # the decode is added once
    assert not dev.fits(900, 900 * 224 * 224) and EmulatedDevice(dev.accelerator, "pixels").fits(100, 100 * 50176)


@pytest.mark.parametrize("name", ["fp32", "amp", "bf16"])
def test_on_cpu_the_step_runs_fp32_and_says_the_precision_is_modelled(name):
    precision = StepPrecision(registry.create("precision", name), cuda=False)
    assert precision.dtype is None and precision.scaler is None and "modelled" in precision.label
    model = torch.nn.Linear(4, 1)
    with precision.autocast():
        loss = model(torch.ones(2, 4)).sum()
    assert loss.dtype == torch.float32
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    precision.backward(loss)
    precision.step(opt)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_amp_on_cuda_autocasts_to_fp16_with_a_scaler():
    precision = StepPrecision(registry.create("precision", "amp"), cuda=True)
    model = torch.nn.Linear(4, 4).cuda()
    with precision.autocast():
        out = model(torch.ones(2, 4, device="cuda"))
    assert out.dtype == torch.float16 and precision.scaler is not None
