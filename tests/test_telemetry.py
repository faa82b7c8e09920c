"""Telemetry: host memory and disk reads of the process tree; NVML skipped cleanly without an NVIDIA driver."""
from __future__ import annotations

import mmap
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from harness.measure.telemetry import MemorySampler, NvmlSampler, read_bytes


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


BURN = ("import sys, time\nend = time.process_time() + 0.3\nwhile time.process_time() < end:\n    pass\n"
        "print('burnt', flush=True)\ntime.sleep(60)\n")


def read_from_device(path: Path) -> int:
    """Read a file after dropping its cached pages; the bytes the kernel says came from the device (0 where
    the file system has no device, e.g. tmpfs)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        before = read_bytes(os.getpid()) or 0
        while os.read(fd, 1 << 20):
            pass
        return (read_bytes(os.getpid()) or 0) - before
    finally:
        os.close(fd)


@pytest.mark.skipif(not MemorySampler.supported, reason="needs /proc/<pid>/smaps_rollup")
def test_memory_sampler_counts_the_windows_loader_cpu_and_disk_reads(tmp_path):
    """Work done after mark_window is counted: 0.3 s of CPU in a child (a loader process), and a file read
    from the device by this process (where the file system has one)."""
    data = tmp_path / "data.bin"
    data.write_bytes(os.urandom(4 << 20))
    with MemorySampler(interval=0.01) as sampler:
        sampler.mark_window()
        assert sampler.loader_cpu_s < 0.1
        child = subprocess.Popen([sys.executable, "-c", BURN], stdout=subprocess.PIPE, text=True)
        try:
            assert child.stdout.readline().strip() == "burnt"
            from_device = read_from_device(data)
            seen = sampler.samples
            deadline = time.monotonic() + 10
            while sampler.samples < seen + 3 and time.monotonic() < deadline:  # the child alive in a sample
                time.sleep(0.01)
            cpu, disk = sampler.loader_cpu_s, sampler.disk_read_bytes
        finally:
            child.kill()
            child.wait()
    assert cpu >= 0.25  # the child's burn (and its start-up), not the sampler's own process
    if from_device >= data.stat().st_size:  # the kernel read it from a device: the window saw it
        assert disk >= from_device
