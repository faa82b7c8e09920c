"""What the visible GPUs are: name, count, memory, driver and CUDA versions (torch.cuda, NVML where
pynvml is installed). Every call is guarded: on a machine without CUDA the answers are empty, never
an error. The lead wires `environment()` into env.json and the baseline's comparability key."""
from __future__ import annotations


def visible_gpus() -> list[dict]:
    """One dict per visible CUDA device: index, name, memory_bytes, capability; [] without CUDA."""
    try:
        import torch

        if not torch.cuda.is_available():
            return []
        out = []
        for i in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(i)
            out.append({"index": i, "name": props.name, "memory_bytes": int(props.total_memory),
                        "capability": f"{props.major}.{props.minor}"})
        return out
    except Exception:  # noqa: BLE001 - a broken driver reads as "no GPU", never a crash
        return []


def gpu_count() -> int:
    return len(visible_gpus())


def _nvml() -> dict:
    """Driver version and NVML's per-device names, or {} when pynvml or the driver is missing."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no pynvml, no driver
        return {}
    try:
        driver = pynvml.nvmlSystemGetDriverVersion()
        return {"driver": driver.decode() if isinstance(driver, bytes) else str(driver)}
    except Exception:  # noqa: BLE001
        return {}
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass


def environment() -> dict:
    """The GPU facts for env.json: devices, count, names, memory, driver, CUDA runtime, cuDNN;
    empty lists and None on a CPU-only machine."""
    try:
        import torch

        cuda = torch.version.cuda
        cudnn = torch.backends.cudnn.version() if torch.cuda.is_available() else None
    except Exception:  # noqa: BLE001
        cuda = cudnn = None
    gpus = visible_gpus()
    return {"gpu_count": len(gpus), "gpus": gpus, "gpu_names": sorted({g["name"] for g in gpus}),
            "gpu_memory_bytes": [g["memory_bytes"] for g in gpus], "cuda_runtime": cuda, "cudnn": cudnn,
            "driver": _nvml().get("driver") if gpus else None}


def comparability_key() -> dict:
    """What makes two runs' GPUs the same for a baseline: name, count, memory, driver and CUDA
    versions."""
    env = environment()
    return {k: env[k] for k in ("gpu_count", "gpu_names", "gpu_memory_bytes", "driver", "cuda_runtime")}
