"""The GPU path's logic that a CPU can check: which device a rank drives and when it refuses, the
precision a GPU cannot run natively, what counts as an out-of-memory, the memory plan after a real OOM,
what a shadow step after an OOM is fed, and DDP's options (harness.run.launch, harness.device.devices,
harness.train.ddpstep)."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from harness.config.request import Torchrun
from harness.device import devices
from harness.errors import UsageError
from harness.run import launch
from harness.train import ddpstep

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def gpus(monkeypatch):
    def visible(n: int) -> None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: n > 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: n)
    return visible


@pytest.fixture
def torchrun(monkeypatch):
    def under(local_world: int) -> Torchrun:
        return Torchrun.from_env({"RANK": "0", "WORLD_SIZE": str(2 * local_world),
                                  "LOCAL_WORLD_SIZE": str(local_world)})
    return under


def test_a_single_node_run_emulates_without_enough_gpus(gpus):
    gpus(2)
    assert launch.resolve_device("auto", 4) == "emulated"
    assert launch.resolve_device("auto", 2) == "cuda"
    with pytest.raises(UsageError, match="needs 4 GPUs"):
        launch.resolve_device("cuda", 4)


def test_under_torchrun_one_gpu_bound_per_task_is_cuda(gpus, torchrun):
    job = torchrun(4)
    gpus(1)  # Slurm --gpus-per-task=1: each task sees its own GPU as device 0
    assert launch.resolve_device("auto", 8, job) == "cuda"
    gpus(4)
    assert launch.resolve_device("auto", 8, job) == "cuda"


def test_under_torchrun_visible_gpus_that_cannot_serve_the_ranks_refuse_instead_of_emulating(gpus, torchrun):
    job = torchrun(4)
    gpus(2)
    with pytest.raises(UsageError, match="each sees 2 GPUs"):
        launch.resolve_device("auto", 8, job)
    assert launch.resolve_device("emulated", 8, job) == "emulated"  # asked for: honoured
    gpus(0)
    assert launch.resolve_device("auto", 8, job) == "emulated"
    with pytest.raises(UsageError, match="sees no GPU"):
        launch.resolve_device("cuda", 8, job)


def test_the_gpu_a_rank_drives(gpus):
    gpus(1)
    assert devices.gpu_index(3) == 0  # bound per task
    gpus(4)
    assert devices.gpu_index(3) == 3
    gpus(2)
    with pytest.raises(UsageError, match="local rank 3 sees 2 GPUs"):
        devices.gpu_index(3)


@pytest.mark.parametrize("capability, supported", [((7, 0), False), ((8, 0), True), ((9, 0), True)])
def test_bf16_is_unsupported_below_compute_capability_8(monkeypatch, capability, supported):
    from strategies import registry

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d=None: capability)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: "Tesla V100" if not supported else "A100")
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: capability[0] >= 8)
    cuda0 = torch.device("cuda", 0)
    reason = ddpstep.StepPrecision.unsupported(registry.create("precision", "bf16"), cuda0)
    assert (reason is None) == supported
    if not supported:
        assert "compute capability 8.0" in reason and "7.0" in reason
    assert ddpstep.StepPrecision.unsupported(registry.create("precision", "amp"), cuda0) is None
    assert ddpstep.StepPrecision.unsupported(registry.create("precision", "bf16"), torch.device("cpu")) is None


def test_what_counts_as_out_of_memory():
    assert ddpstep.is_oom(torch.OutOfMemoryError("CUDA out of memory"))
    assert ddpstep.is_oom(RuntimeError("cuDNN error: CUDNN_STATUS_ALLOC_FAILED"))
    assert ddpstep.is_oom(RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling cublasCreate"))
    assert not ddpstep.is_oom(RuntimeError("nvjpeg: unsupported JPEG"))
    assert not ddpstep.is_oom(ValueError("out of memory"))  # not a runtime failure


def _cuda_device_without_a_gpu() -> devices.CudaDevice:
    d = object.__new__(devices.CudaDevice)
    d.memory_model, d.oom_units = None, None
    return d


def test_a_real_oom_makes_later_batches_that_large_split_ahead():
    d = _cuda_device_without_a_gpu()
    assert d.fits(64, 64 * 1000)
    d.note_oom(64, 64 * 1000)
    assert not d.fits(64, 64 * 1000) and not d.fits(80, 80 * 1000) and d.fits(32, 32 * 1000)
    d.set_memory_model(base=100.0, per_unit=1.0, budget=20_000.0)
    assert not d.fits(32, 32 * 1000)  # the model says 32,100 bytes > 20,000
    d.clear_memory_model()  # the next cell is not dynamic: no plan, no remembered OOM
    assert d.fits(64, 64 * 1000)


def test_a_shadow_step_after_an_oom_is_fed_a_tiny_batch():
    t = {"images": torch.zeros(16, 3, 224, 200), "tokens": torch.ones(16, 77, dtype=torch.long)}
    small = ddpstep.tiny(t)
    assert small["images"].shape == (2, 3, 32, 32) and small["tokens"].shape == (2, 77)


def test_ddp_broadcasts_no_buffers_and_keeps_gradients_in_its_buckets(monkeypatch):
    seen = {}

    class FakeDDP:
        def __init__(self, model, **options):
            seen.update(options)

    monkeypatch.setattr(ddpstep, "DDP", FakeDDP)
    ddpstep.make_ddp(nn.Linear(2, 2), bucket_cap_mb=1)
    assert seen["gradient_as_bucket_view"] is True and seen["bucket_cap_mb"] == 1
    assert seen.get("forward_sync_buffers", seen.get("broadcast_buffers")) is False


def test_the_normalisation_constants_are_made_once_per_device():
    from harness.data import fields

    a = fields.normalise(torch.zeros(1, 3, 2, 2, dtype=torch.uint8))
    first = fields._constants(torch.device("cpu"))
    fields.normalise(torch.zeros(1, 3, 2, 2, dtype=torch.uint8))
    assert fields._constants(torch.device("cpu"))[0] is first[0] and a.dtype == torch.float32


@pytest.mark.slow  # imports them in a fresh process
def test_the_strategies_load_without_the_optional_format_libraries():
    """The GPU machine's image has no webdataset, lmdb or litdata: the registry must still load (each storage
    imports its library when it reads or writes)."""
    import subprocess
    import sys

    guard = ("import builtins\nreal = builtins.__import__\n"
             "def guard(name, *a, **k):\n"
             "    if name.split('.')[0] in ('webdataset', 'lmdb', 'litdata'):\n"
             "        raise ImportError('not installed: ' + name)\n"
             "    return real(name, *a, **k)\n"
             "builtins.__import__ = guard\n"
             "from strategies import registry\nregistry.load_builtins()\nprint(len(registry.names('storage')))\n")
    out = subprocess.run([sys.executable, "-c", guard], capture_output=True, text=True, cwd=str(REPO))
    assert out.returncode == 0, out.stderr
