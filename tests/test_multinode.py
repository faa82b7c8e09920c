"""Two torchrun "nodes" on one machine (--nnodes 2 --nproc-per-node 1, c10d rendezvous on localhost), sharing
one data directory as nodes share a network file system: the data is materialised once (a lock file, then
an atomic rename), never raced, and rank 0 alone writes the run directory."""
from __future__ import annotations

import json
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from harness.results import rundir

REPO = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_nodes_materialise_once_and_rank_0_writes_results(tmp_path):
    data, out = tmp_path / "data", tmp_path / "out"
    endpoint, run_id = f"127.0.0.1:{_port()}", uuid.uuid4().hex[:8]
    nodes = [subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
         "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", run_id,
         "run_bench.py", "--scenario", "smoke", "--only", "storage=mmap", "--steps", "3", "--samples", "96",
         "--data-dir", str(data), "--out", str(out)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [node.communicate(timeout=300) for node in nodes]
    for node, (_, err) in zip(nodes, outputs):
        assert node.returncode == 0, err[-3000:]
    stderr = "".join(err for _, err in outputs)
    assert stderr.count("materialise mmap") >= 1
    generated = [err for _, err in outputs if "materialise mmap" in err]
    assert len(generated) == 1, "both nodes generated the data"
    (dataset,) = [p for p in data.iterdir() if p.is_dir()]
    assert not [p for p in data.iterdir() if ".tmp-" in p.name]  # no leftover of a raced generation
    assert json.loads((dataset / "manifest.json").read_text())["count"] == 96
    (run,) = list(out.iterdir())  # one run directory: rank 0's
    (cell,) = rundir.read_results(run)
    assert cell.world_size == 2 and [r.rank for r in cell.ranks] == [0, 1]
    assert cell.error is None and cell.measured and (run / "report.md").exists()
