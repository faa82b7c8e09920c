"""Preflight of the GPU check: is this machine able to run the rest? Every item is checked and printed
(`ok` / `FAILED` / `note`), then one PASS or FAIL line; exit 1 when any item failed, so the check stops early.

PreflightItems: torch and torchvision import, their versions and torchvision's decode_jpeg; the harness and the
libraries the check's stages import (REQUIRED); the libraries of storages and decoders the check never
selects (OPTIONAL: its runs use storage mmap and the default decoder, PIL where simplejpeg is absent) are
notes, never failures; CUDA visible; NVML present (the nvidia-ml-py package and the driver's library); bf16
native on every visible GPU (compute capability 8.0 or later: torch.cuda.is_bf16_supported() also says True on
a V100, where bf16 is emulated); below 8.0 a note: the harness records the bf16 cells as unsupported there, the
check's bf16 cell included; every torch device's UUID found among NVML's devices (the index NVML gives each
one is printed: it differs from torch's under CUDA_VISIBLE_DEVICES); the gloo and NCCL backends; the free
space of /dev/shm (reported only)."""
from __future__ import annotations

import importlib
import os
import sys

import gpucommon

# import name -> the distribution the harness declares (pyproject.toml): what the check's stages import (the
# run stages' reports read with pandas, tabulate and matplotlib; hdf5 and parquet are in the gpu scenario)
REQUIRED = {"numpy": "numpy", "h5py": "h5py", "PIL": "pillow", "pandas": "pandas", "tabulate": "tabulate",
            "matplotlib": "matplotlib", "pyarrow": "pyarrow", "pynvml": "nvidia-ml-py"}
# import name -> (distribution, what needs it): imported only when a scenario selects it; the check never does
# (its run stages use storage mmap; the default decoder is pil where simplejpeg is absent). The GPU image has
# none of them. tests/test_gpu_image.py checks that the harness and the stages run without them.
OPTIONAL = {"simplejpeg": ("simplejpeg", "decoder = \"simplejpeg\" (the default falls back to pil)"),
            "webdataset": ("webdataset", "storage webdataset"), "braceexpand": ("braceexpand", "webdataset"),
            "lmdb": ("lmdb", "storage lmdb")}
# what the stages run besides the scripts themselves: the CLI, oomcheck's ranks, the profiler, the memory probe,
# the launcher of the torchrun stage
STAGE_MODULES = ("harness.cli", "harness.checks.oom.command", "harness.checks.oom.inject", "harness.measure.profiling",
                 "harness.device.memprobe", "harness.train.trainloop", "torch.distributed.run")
MIN_TORCH = (2, 11)
BF16_CAPABILITY = (8, 0)


class PreflightItems:
    def __init__(self):
        self.failed: list[str] = []
        self.figures: dict = {}

    def ok(self, name: str, text: str) -> None:
        print(f"  ok      {name}: {text}")
        self.figures[name] = text

    def fail(self, name: str, text: str) -> None:
        print(f"  FAILED  {name}: {text}")
        self.figures[name] = "FAILED: " + text
        self.failed.append(name)

    def note(self, name: str, text: str) -> None:
        print(f"  note    {name}: {text}")
        self.figures[name] = "note: " + text


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split("+")[0].split(".")[:2] if p.isdigit())


def check_torch(items: PreflightItems):
    try:
        import torch
    except ImportError as err:
        items.fail("torch", f"does not import ({err})")
        return None
    v = torch.__version__
    (items.ok if _version(v) >= MIN_TORCH else items.fail)(
        "torch", f"{v}, CUDA build {torch.version.cuda or 'none'} (the harness is tested with 2.11 and 2.13)")
    try:
        import torchvision
        from torchvision.io import decode_jpeg  # noqa: F401

        items.ok("torchvision", f"{torchvision.__version__} (decode_jpeg present)")
    except ImportError as err:
        items.fail("torchvision", f"does not import ({err}); preprocess = device needs it")
    return torch


def check_libraries(items: PreflightItems) -> None:
    missing = []
    for module, dist in REQUIRED.items():
        try:
            importlib.import_module(module)
        except ImportError:
            missing.append(dist)
    if missing:
        items.fail("libraries", f"missing: {', '.join(missing)}; without network, carry their wheels and set "
                                f"DLBENCH_WHEELS=<folder> (scripts/gpu/fetch_wheels.sh makes the folder)")
    else:
        items.ok("libraries", ", ".join(REQUIRED.values()))
    for module, (dist, needed_by) in OPTIONAL.items():
        try:
            importlib.import_module(module)
        except ImportError:
            items.note(dist, f"not installed: only {needed_by} needs it, which the check does not run")
    try:
        from strategies.registry import load_builtins

        load_builtins()
        for module in STAGE_MODULES:
            importlib.import_module(module)

        items.ok("harness", "imports, with every built-in strategy and the modules the stages run")
    except Exception as err:  # noqa: BLE001 - any failure here is one line
        items.fail("harness", f"does not import from the source tree: {type(err).__name__}: {err} "
                              "(run from the repository root with PYTHONPATH=.)")


def check_cuda(items: PreflightItems, torch) -> list[str]:
    """Torch's device UUIDs (text), after checking CUDA and bf16 on each device."""
    if not torch.cuda.is_available():
        items.fail("cuda", "torch sees no CUDA device (driver, CUDA_VISIBLE_DEVICES, or a CPU build of torch)")
        return []
    uuids = []
    for i in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(i)
        cap = (props.major, props.minor)
        items.ok(f"cuda:{i}", f"{props.name}, {props.total_memory / 2**30:.1f} GiB, capability {cap[0]}.{cap[1]}")
        if cap >= BF16_CAPABILITY:
            items.ok(f"bf16 cuda:{i}", f"native (capability {cap[0]}.{cap[1]} >= 8.0)")
        else:  # the harness records bf16 cells as unsupported here (the torchrun stage's bf16 cell with them)
            items.note(f"bf16 cuda:{i}", f"emulated only (capability {cap[0]}.{cap[1]} < 8.0): the bf16 cells "
                                         "are recorded as unsupported here")
        uuid = getattr(props, "uuid", None)
        if uuid is None:
            items.fail(f"uuid cuda:{i}", "this torch's device properties have no uuid")
        else:
            uuids.append(gpucommon.uuid_text(uuid))
    return uuids


def check_host(items: PreflightItems, torch) -> None:
    """The process-group backends the check uses (gloo for two ranks on one GPU, NCCL under torchrun) and the
    shared memory the DataLoader workers hand batches over in (reported, never a failure)."""
    import torch.distributed as dist

    backends = {b: bool(getattr(dist, f"is_{b}_available", lambda: False)()) for b in ("gloo", "nccl")}
    missing = [b for b, there in backends.items() if not there]
    (items.fail if missing else items.ok)("distributed", "backends " + ", ".join(
        f"{b} {'available' if there else 'MISSING'}" for b, there in backends.items()))
    try:
        stat = os.statvfs("/dev/shm")
        free_mb = stat.f_bavail * stat.f_frsize / 1e6
        items.note("/dev/shm", f"{free_mb:.0f} MB free (DataLoader workers pass batches through it)")
    except OSError:
        items.note("/dev/shm", "absent: DataLoader workers fall back to other shared memory")


def check_nvml(items: PreflightItems, torch_uuids: list[str]) -> None:
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as err:  # noqa: BLE001 - no library or no driver
        items.fail("nvml", f"does not initialise ({type(err).__name__}: {err})")
        return
    try:
        driver = pynvml.nvmlSystemGetDriverVersion()
        count = pynvml.nvmlDeviceGetCount()
        nvml = [gpucommon.uuid_text(pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i)))
                for i in range(count)]
        items.ok("nvml", f"driver {driver.decode() if isinstance(driver, bytes) else driver}, {count} device(s)")
        for i, uuid in enumerate(torch_uuids):
            if uuid in nvml:
                j = nvml.index(uuid)
                items.ok(f"uuid cuda:{i}", f"{uuid} is NVML device {j}" + ("" if i == j else
                         f" (not {i}: NVML must be indexed by UUID here, not by torch's index)"))
            else:
                items.fail(f"uuid cuda:{i}", f"{uuid} is not among NVML's devices {nvml}")
    finally:
        pynvml.nvmlShutdown()


def main(argv: list[str] | None = None) -> int:
    args = gpucommon.parser(__doc__).parse_args(argv)
    items = PreflightItems()
    items.ok("python", sys.version.split()[0])
    torch = check_torch(items)
    check_libraries(items)
    if torch is not None:
        check_host(items, torch)
        check_nvml(items, check_cuda(items, torch))
    why = "every item holds" if not items.failed else "failed: " + ", ".join(items.failed)
    return gpucommon.finish("preflight", not items.failed, items.figures, args.out, why, show=False)


if __name__ == "__main__":
    sys.exit(main())
