"""Telemetry: host memory and disk reads of the process tree; NVML skipped cleanly without an NVIDIA driver."""
from __future__ import annotations

import mmap
import time

import pytest
import torch

from harness.measure.telemetry import MemorySampler, NvmlSampler


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


@pytest.mark.skipif(not MemorySampler.supported, reason="needs /proc/<pid>/smaps_rollup")
def test_memory_sampler_sees_this_process_and_restarts_at_the_window():
    with MemorySampler(interval=0.01) as sampler:
        start = sampler.peak_pss  # the sample taken on entering
        # 64 MiB of fresh anonymous pages, each touched: resident, and returned to the kernel on close (a
        # bytearray may reuse heap pages an earlier test left resident, which PSS already counted)
        ballast = mmap.mmap(-1, 64 << 20)
        for offset in range(0, 64 << 20, 4096):
            ballast[offset] = 1
        seen = sampler.samples
        deadline = time.monotonic() + 10
        while sampler.samples < seen + 2 and time.monotonic() < deadline:  # a loaded host may be slow
            time.sleep(0.01)
        peak_before = sampler.peak_pss
        ballast.close()
        sampler.mark_window()  # the peaks restart here (warm-up excluded)
    assert peak_before >= start + (60 << 20) and sampler.samples >= 3
    assert 0 < sampler.peak_pss < peak_before - (32 << 20) and sampler.peak_pss <= sampler.peak_rss
    assert sampler.disk_read_bytes >= 0
