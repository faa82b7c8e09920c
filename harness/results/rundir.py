"""A run's directory under results/: env.json, cells.jsonl (appended per cell), summary.csv, report.md."""
from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

from harness.measure import gpuinfo
from harness.errors import UsageError
from harness.results.cellresult import CellResult

REPO = Path(__file__).resolve().parents[2]


def new_run_dir(out_root: Path, scenario_name: str) -> Path:
    """Create results/<UTC time>-<scenario>/; a one-line UsageError if out_root is not writable."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    run_dir = Path(out_root) / f"{stamp}-{scenario_name}"
    n = 1
    while run_dir.exists():
        n += 1
        run_dir = Path(out_root) / f"{stamp}-{scenario_name}-{n}"
    try:
        run_dir.mkdir(parents=True)
        probe = run_dir / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as err:
        raise UsageError(f"output directory {out_root} is not writable ({err.strerror}); "
                         f"pass --out with a writable directory") from None
    return run_dir


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _git_commit() -> dict:
    def git(*args: str) -> str | None:
        try:
            return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True,
                                  timeout=5).stdout.strip() or None
        except (OSError, subprocess.SubprocessError):
            return None
    return {"commit": git("rev-parse", "HEAD"), "dirty": bool(git("status", "--porcelain"))}


def environment(argv: list[str], device: dict) -> dict:
    try:
        mem_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9
    except (ValueError, OSError):
        mem_gb = None
    gpu = gpuinfo.environment()  # devices, names, memory, driver, CUDA runtime, cuDNN (empty without CUDA)
    return {
        "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": [sys.executable, sys.argv[0], *argv],
        "python": platform.python_version(),
        "versions": {d: _version(d) for d in ("torch", "h5py", "numpy", "pandas", "tabulate", "pillow")},
        "platform": platform.platform(),
        "hostname": platform.node(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "memory_gb": mem_gb,
        "gpus": [g["name"] for g in gpu["gpus"]],
        "gpu": gpu,
        "device": device,
        "git": _git_commit(),
    }


def write_json(path: Path, obj: dict) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")


def append_line(path: Path, obj: dict) -> None:
    """Append one object as one JSON line and flush it to disk at once."""
    with open(path, "a") as f:
        f.write(json.dumps(obj, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())


def append_cell(run_dir: Path, cell: dict) -> None:
    append_line(Path(run_dir) / "cells.jsonl", cell)


class ResultsError(ValueError):
    """A run directory's file that cannot be read (not JSON, not the expected shape); one line, with the path."""


_WARNED: set[str] = set()  # files whose cut last line was already reported by this process


def read_lines(path: Path) -> list[dict]:
    """The JSON objects of a .jsonl file, one per non-empty line; [] when the file does not exist.

    A last line that is not valid JSON was cut off by a crash while it was written: it is skipped with one
    warning. A bad line anywhere else is a ResultsError."""
    if not path.exists():
        return []
    lines = [(n, line) for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
             if line.strip()]
    out = []
    for i, (number, line) in enumerate(lines):
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError as err:
            if i < len(lines) - 1:
                raise ResultsError(f"{path}:{number} is not valid JSON ({err.msg})") from None
            if str(path) not in _WARNED:
                _WARNED.add(str(path))
                print(f"run_bench.py: warning: {path}:{number}: the last line is cut off (the run was "
                      f"killed while writing it); skipped", file=sys.stderr)
    return out


def drop_cut_tail(path: Path) -> bool:
    """Remove a last line cut off by a crash (no final newline, not JSON), so that lines appended later
    stay whole; True when one was removed."""
    path = Path(path)
    if not path.exists():
        return False
    data = path.read_bytes()
    if not data or data.endswith(b"\n"):
        return False
    start = data.rfind(b"\n") + 1
    try:
        json.loads(data[start:])
        with open(path, "ab") as f:  # a whole object that only lacks its newline
            f.write(b"\n")
        return False
    except ValueError:
        with open(path, "r+b") as f:
            f.truncate(start)
        return True


def read_results(run_dir: Path) -> list[CellResult]:
    """cells.jsonl as CellResults, in file order; [] when it does not exist."""
    path = Path(run_dir) / "cells.jsonl"
    out = []
    for number, obj in enumerate(read_lines(path), 1):
        try:
            out.append(CellResult.from_json(obj))
        except ValueError as err:
            raise ResultsError(f"{path}: line {number}: {err}") from None
    return out


read_cells = read_results  # the older name


def read_probe(run_dir: Path) -> dict:
    """probe.jsonl as {"ideal_samples_per_s": [per repeat], "memcpy_gb_s": [per repeat]}."""
    path = Path(run_dir) / "probe.jsonl"
    try:
        lines = sorted(read_lines(path), key=lambda p: p["repeat"])
        return {k: [p[k] for p in lines] for k in ("ideal_samples_per_s", "memcpy_gb_s")}
    except (KeyError, TypeError) as err:
        raise ResultsError(f"{path} lacks {err} in a line; it is not a probe.jsonl of this harness") from None


def read_env(run_dir: Path) -> dict:
    """env.json; {} when it does not exist."""
    path = Path(run_dir) / "env.json"
    if not path.exists():
        return {}
    try:
        env = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ResultsError(f"{path} is not valid JSON (line {err.lineno}: {err.msg})") from None
    if not isinstance(env, dict):
        raise ResultsError(f"{path} is not a JSON object")
    return env
