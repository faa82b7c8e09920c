"""What every GPU micro-check of scripts/gpu_check.sh shares: its command line (--out), the skip without CUDA,
and its result (one line on stdout, a JSON file under --out).

Exit codes: 0 the check held, 1 it did not, 77 skipped (no CUDA device visible: nothing was measured)."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

SKIPPED = 77  # the automake convention for a test that could not run here


def parser(doc: str) -> argparse.ArgumentParser:
    """A parser whose description is the check's docstring; --out: where its JSON result goes."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=None, help="folder for the check's JSON result (default: none)")
    return p


def cuda_or_skip(name: str) -> None:
    """Exit SKIPPED with one line when torch sees no CUDA device (a CPU machine: nothing to measure)."""
    import torch

    if not torch.cuda.is_available():
        print(f"SKIP {name}: no CUDA device visible (torch {torch.__version__}, built for CUDA "
              f"{torch.version.cuda or 'none'}); this check needs a GPU")
        sys.exit(SKIPPED)


def finish(name: str, ok: bool, figures: dict, out: Path | None, why: str = "", show: bool = True) -> int:
    """Print the figures (unless not `show`), then the verdict `PASS|FAIL name: why` as the last line;
    write <out>/<name>.json; return the exit code."""
    if show:
        print(json.dumps(figures, indent=1, sort_keys=True, default=str))
    print(f"{'PASS' if ok else 'FAIL'} {name}" + (f": {why}" if why else ""))
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{name}.json").write_text(json.dumps({"ok": ok, "why": why, **figures}, indent=1,
                                                     sort_keys=True, default=str))
    return 0 if ok else 1


def nvml_index_of(torch_index: int) -> int | None:
    """NVML's index of torch's CUDA device `torch_index`, matched by UUID (CUDA_VISIBLE_DEVICES renumbers
    torch's devices, never NVML's); None without NVML or without a match."""
    import torch

    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no library or no driver
        return None
    try:
        want = uuid_text(torch.cuda.get_device_properties(torch_index).uuid)
        for i in range(pynvml.nvmlDeviceGetCount()):
            if uuid_text(pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i))) == want:
                return i
        return None
    finally:
        pynvml.nvmlShutdown()


def uuid_text(uuid) -> str:
    """A device UUID as comparable text, the harness's own spelling (harness.device.devices.uuid_text:
    lower-cased, without NVML's `GPU-` prefix), so that the checks and the harness match devices alike."""
    from harness.device.devices import uuid_text as harness_uuid_text

    return harness_uuid_text(uuid)
