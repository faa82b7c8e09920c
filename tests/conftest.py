"""Shared fixtures: one real end-to-end smoke run (2 ranks, gloo, real DataLoader workers) per session."""
from __future__ import annotations

import os
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


def read_cells(run_dir: Path) -> list:
    """A run's cells.jsonl as the harness reads it (harness.results.rundir.read_results: CellResults)."""
    from harness.results import rundir

    return rundir.read_results(run_dir)


@pytest.fixture(scope="session")
def smoke_run(tmp_path_factory, data_dir):
    """`run_bench.py --scenario smoke` end to end; returns (process, run directory, cells as CellResults)."""
    out = tmp_path_factory.mktemp("results")
    proc = run_bench("--scenario", "smoke", "--data-dir", str(data_dir), "--out", str(out), "--quiet")
    assert proc.returncode == 0, proc.stderr
    (run_dir,) = list(out.iterdir())
    return proc, run_dir, read_cells(run_dir)


@pytest.fixture(scope="module")
def s3_server():
    """The project's own S3 store (moto's server mode on loopback, harness.lab.server) with its AWS
    environment set for the module's tests, and the environment as it was after them (a module that asks for it
    skips first where moto's server mode or obstore is missing)."""
    from harness.lab.server import ObjectServer

    saved = dict(os.environ)
    with ObjectServer("dlbench") as s:
        os.environ.update(s.env())
        yield s
    os.environ.clear()
    os.environ.update(saved)
