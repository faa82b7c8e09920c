"""Whole runs that must end well: a broken sampler is caught, uneven ranks do not hang, an OOM is reported."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import read_cells, run_bench
from scenarios_for_tests import write_scenario

pytestmark = pytest.mark.slow  # every test here spawns rank processes

TRAINING = {"batch_size": 8, "image_size": 64, "warmup_steps": 1, "steps": 10, "workers": 0}


def run(tmp_path: Path, data_dir: Path, matrix: dict, *args: str, memory_gb: float | None = None):
    hardware = {} if memory_gb is None else {"memory_gb": memory_gb}
    path = write_scenario(tmp_path / "check.toml", {"storage": ["mmap"], **matrix}, hardware=hardware,
                          training=TRAINING, description="correctness checks")
    out = tmp_path / "out"
    proc = run_bench("--scenario", str(path), "--data-dir", str(data_dir), "--out", str(out), "--quiet",
                     "--plugin", "tests.plugins.seed_strategies", *args, timeout=240)
    (run_dir,) = list(out.iterdir())
    return proc, read_cells(run_dir)


def test_seed_sampler_is_caught(tmp_path, data_dir):
    proc, cells = run(tmp_path, data_dir, {"sampler": ["default", "seed_balance"]})
    assert proc.returncode == 1, proc.stderr
    default, seed = sorted(cells, key=lambda c: c.name("sampler") != "default")  # cells run in a random order
    assert default.coverage.ok and default.coverage.duplicates == 0 and default.contract_ok
    assert not seed.coverage.ok and not seed.contract_ok
    first = seed.coverage.epochs[0]
    assert first.duplicates > 0 and first.missing > 0 and first.broken  # both ranks read the same prefix
    assert "sampler contract is broken in 1 cell(s)" in proc.stderr
    assert "BROKEN" in proc.stdout


def test_uneven_ranks_finish_with_equal_steps(tmp_path, data_dir):
    proc, cells = run(tmp_path, data_dir, {"batching": ["uneven"]}, "--epochs", "2")
    assert proc.returncode == 0, proc.stderr
    (cell,) = cells
    ranks = cell.ranks
    assert ranks[0].steps == ranks[1].steps  # the same number of steps on every rank
    assert ranks[1].shadow_steps > 0 and ranks[0].shadow_steps == 0
    assert cell.figures.shadow_steps == ranks[1].shadow_steps
    assert ranks[1].batch_sizes.count(0) == ranks[1].shadow_steps  # a shadow step holds no batch
    assert cell.coverage.ok and cell.coverage.coverage_pct == 100.0
    assert len({r.param_digest for r in ranks}) == 1


def test_out_of_memory_fixed_stops_dynamic_splits_and_matrix_goes_on(tmp_path, data_dir):
    # 0.9 GB of model state + 4 MB per padded 64x64 image: 0.91 GB holds two images, not a batch of 8
    matrix = {"batching": ["fixed", {"name": "dynamic", "min_batch": 4, "max_batch": 8}]}
    proc, cells = run(tmp_path, data_dir, matrix, memory_gb=0.91)
    assert proc.returncode == 0, proc.stderr
    fixed, dynamic = sorted(cells, key=lambda c: c.name("batching") != "fixed")  # cells run in a random order
    assert fixed.error.startswith("OOM: emulated V100-16GB: a batch of 8 needs") and not fixed.measured
    assert "OOM (cell stopped)" in proc.stdout
    assert dynamic.error is None
    f = dynamic.figures
    assert f.oom_events > 0  # batches of 4 were split into micro-batches that fit
    assert f.oom_events == sum(r.oom_events for r in dynamic.ranks)
    assert f.device_peak_gb <= 0.91
    assert f.mean_batch >= 4 and f.window_steps == 10
    assert len({r.param_digest for r in dynamic.ranks}) == 1


def test_runs_under_torchrun(tmp_path, data_dir):
    """Under torchrun the rank processes already exist: the harness joins them instead of spawning."""
    import subprocess
    import sys

    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         "run_bench.py", "--scenario", "smoke", "--only", "storage=mmap", "--steps", "3",
         "--data-dir", str(data_dir), "--out", str(out), "--quiet"],
        cwd=Path(__file__).resolve().parent.parent, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (run_dir,) = list(out.iterdir())
    (cell,) = read_cells(run_dir)
    assert cell.world_size == 2 and [r.steps for r in cell.ranks] == [3, 3]
    assert len({r.param_digest for r in cell.ranks}) == 1
    assert json.loads((run_dir / "env.json").read_text())["dataset_gb"] > 0
