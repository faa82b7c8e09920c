"""Shared fixtures: one real end-to-end smoke run (2 ranks, gloo, real DataLoader workers) per session."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def run_bench(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "run_bench.py"), *args], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("data")


@pytest.fixture(scope="session")
def smoke_run(tmp_path_factory, data_dir):
    """`run_bench.py --scenario smoke` end to end; returns (process, run directory, cells)."""
    out = tmp_path_factory.mktemp("results")
    proc = run_bench("--scenario", "smoke", "--data-dir", str(data_dir), "--out", str(out), "--quiet")
    assert proc.returncode == 0, proc.stderr
    (run_dir,) = list(out.iterdir())
    cells = [json.loads(line) for line in (run_dir / "cells.jsonl").read_text().splitlines()]
    return proc, run_dir, cells
