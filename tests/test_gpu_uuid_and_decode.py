"""Two GPU details that need no GPU: the harness matches NVML's device to torch's by UUID whatever the case
(as the preflight does, with the same helper), and advice for a real GPU labels the catalogue's decode rate
as assumed instead of presenting it as that GPU's."""
from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import SimpleNamespace

import torch

from harness.analysis.recommend import recommend
from harness.analysis.targetmodel import Costs
from harness.config.accelerators import get_accelerator
from harness.config.target import Target
from harness.device import devices

CHECKS = Path(__file__).resolve().parents[1] / "scripts" / "gpu"
TORCH_UUID = "1a2b3c4d-0000-1111-2222-333344445555"


def fake_nvml(uuids: list[str]) -> SimpleNamespace:
    return SimpleNamespace(nvmlInit=lambda: None, nvmlShutdown=lambda: None,
                           nvmlDeviceGetCount=lambda: len(uuids), nvmlDeviceGetHandleByIndex=lambda i: i,
                           nvmlDeviceGetUUID=lambda handle: uuids[handle].encode())


def test_the_harness_finds_nvmls_device_whatever_the_case(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(["GPU-FFFF0000-0000-0000-0000-000000000000",
                                                          "GPU-" + TORCH_UUID.upper()]))
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: SimpleNamespace(uuid=TORCH_UUID))
    assert devices.nvml_index_of(0) == 1


def test_the_preflight_and_the_harness_spell_uuids_alike():
    if str(CHECKS) not in sys.path:
        sys.path.insert(0, str(CHECKS))
    gpucommon = importlib.import_module("gpucommon")
    for spelling in ("GPU-" + TORCH_UUID.upper(), TORCH_UUID, b"gpu-" + TORCH_UUID.encode(), "MIG-Ab12"):
        assert gpucommon.uuid_text(spelling) == devices.uuid_text(spelling)
    assert devices.uuid_text("GPU-" + TORCH_UUID.upper()) == TORCH_UUID


def advice(device_s: float | None):
    """A cell whose decode binds two cores: the advice moves it to the device (cost from the catalogue)."""
    costs = Costs(workload="pixels", loader_s=0.01, rank_s=0.001, device_s=device_s, bytes_per_sample=1e6,
                  stages={"read": 0.001, "decode": 0.008, "transform": 0.001})
    target = Target(nodes=1, gpus_per_node=1, cores_per_node=2.0, accelerator="V100-16GB", workers_per_rank=1,
                    batch_size=32)
    return recommend(costs, target, get_accelerator("V100-16GB"), source_pixels_per_sample=4e6)


def test_a_real_gpus_advice_labels_the_catalogues_decode_rate_assumed():
    real = advice(device_s=0.001)  # a run on a real V100: its device time measured
    assert real.preprocess == "device"
    assert "the catalogue's assumed 1000 Mpix/s for V100-16GB, not measured on this GPU" in real.text()


def test_an_emulated_runs_advice_has_no_such_label():
    emulated = advice(device_s=None)  # every device figure is the catalogue's model there
    assert emulated.preprocess == "device" and "assumed" not in emulated.text()
