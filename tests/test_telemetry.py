"""Telemetry: real-GPU NVML sampling is skipped cleanly on a machine without an NVIDIA driver, and works where there is one."""
from __future__ import annotations

import time

import pytest
import torch

from harness.telemetry import NvmlSampler


def test_nvml_sampler_without_a_device_reports_nothing():
    with NvmlSampler(None) as sampler:
        sampler.mark_window()
    assert sampler.figures() is None and sampler._thread is None


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU and its driver")
def test_nvml_sampler_samples_at_10_hz_or_faster():
    with NvmlSampler(0, interval=0.05) as sampler:
        sampler.mark_window()
        x = torch.randn(4096, 4096, device="cuda")
        end = time.perf_counter() + 1.0
        while time.perf_counter() < end:
            x = x @ x
            x /= x.norm()
        torch.cuda.synchronize()
    f = sampler.figures()
    assert f["nvml_samples"] >= 10 and f["nvml_util_max_pct"] > 0
