"""The emulated accelerator: modelled step time and memory, and a real OutOfMemoryError when it is full."""
from __future__ import annotations

import time

import pytest
import torch

from harness.config.accelerators import get_accelerator, load_catalogue
from harness.device.devices import EmulatedDevice


def test_catalogue_has_the_named_accelerators_with_sources():
    cat = load_catalogue()
    assert {"V100-16GB", "V100-32GB", "A100-80GB", "H100-80GB", "H200"} <= set(cat)
    for acc in cat.values():
        assert acc.source and acc.memory_bytes > 0
    # the A100 trains faster than the V100 on the same batch
    px = 32 * 224 * 224
    assert cat["A100-80GB"].step_seconds("pixels", 32, px) < cat["V100-16GB"].step_seconds("pixels", 32, px)


def test_step_model_matches_cited_throughput():
    v100 = get_accelerator("V100-16GB")
    batch = 256
    t = v100.step_seconds("pixels", batch, batch * 224 * 224)
    assert batch / (t - v100.step_overhead_s) == pytest.approx(1200)


def test_pad_lasts_at_least_the_modelled_time():
    dev = EmulatedDevice(get_accelerator("V100-16GB"), "pixels")
    start = time.perf_counter()
    modelled = dev.begin_step(32, 32 * 224 * 224)
    dev.pad()
    assert time.perf_counter() - start >= modelled
    assert dev.padded_s > 0 and dev.overruns == 0
    assert dev.peak_bytes == dev.accelerator.memory_needed("pixels", 32, 32 * 224 * 224)


def test_batch_too_big_raises_out_of_memory():
    dev = EmulatedDevice(get_accelerator("V100-16GB"), "pixels")
    with pytest.raises(torch.OutOfMemoryError, match="emulated V100-16GB"):
        dev.begin_step(1024, 1024 * 224 * 224)
    assert dev.peak_bytes == 0
