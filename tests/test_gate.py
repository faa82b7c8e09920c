"""The CI gate and the offline commands through the real CLI: exit codes on planted changes, report rebuilt
from cells.jsonl alone."""
from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest

from conftest import REPO, run_bench

FIXTURE = REPO / "tests" / "fixtures" / "cells_4xV100.jsonl"
CELLS = [json.loads(line) for line in FIXTURE.read_text().splitlines()][:4]
COMPARABLE = {"dataset_key": "k", "world_size": 4, "workload": "pixels", "batch_size": 32,
              "accelerator": "V100-16GB", "emulated": True}


def make_run(path: Path, factors: dict[str, float] | None = None, repeats: int = 5, world_size: int = 4,
             probe: float = 1000.0) -> Path:
    """A run directory like the harness writes, with throughput scaled per cell by `factors`."""
    path.mkdir(parents=True)
    lines = []
    for repeat in range(repeats):
        for cell in CELLS:
            line = copy.deepcopy(cell)
            noise = 1 + 0.01 * ((repeat * 7 + len(lines)) % 5 - 2)  # +-2%, deterministic
            line["figures"]["throughput"] *= noise * (factors or {}).get(cell["cell"], 1.0)
            line["repeat"] = repeat
            lines.append(line)
    (path / "cells.jsonl").write_text("".join(json.dumps(c) + "\n" for c in lines))
    (path / "probe.jsonl").write_text("".join(json.dumps({"repeat": r, "ideal_samples_per_s": probe,
                                                          "memcpy_gb_s": 5.0}) + "\n" for r in range(repeats)))
    env = {"scenario": "4xV100", "comparable": dict(COMPARABLE, world_size=world_size),
           "versions": {"torch": "2.13.0"}, "cpu_count": 2, "cpu_model": "test", "memory_gb": 24,
           "device": {"mode": "emulated", "accelerator": "V100-16GB", "world_size": world_size},
           "dataset": {"samples": 2000}}
    (path / "env.json").write_text(json.dumps(env))
    return path


def test_identical_runs_pass(tmp_path):
    a, b = make_run(tmp_path / "a"), make_run(tmp_path / "b")
    proc = run_bench("compare", str(a), str(b))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 slower, 0 faster, 4 unchanged" in proc.stdout


def test_planted_regression_fails_with_exit_1(tmp_path):
    slow = CELLS[1]["cell"]
    a, b = make_run(tmp_path / "a"), make_run(tmp_path / "b", {slow: 0.8})
    proc = run_bench("compare", str(a), str(b), "--markdown")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "1 slower" in proc.stdout and "| " in proc.stdout  # a markdown table for the PR comment
    row = next(line for line in proc.stdout.splitlines() if slow.split(",")[1] in line and "slower" in line)
    assert "-20" in row


def test_machine_normalised_by_default(tmp_path):
    """A machine twice as fast in the probe and in every cell: unchanged normalised, faster raw."""
    a = make_run(tmp_path / "a")
    b = make_run(tmp_path / "b", {c["cell"]: 2.0 for c in CELLS}, probe=2000.0)
    assert run_bench("compare", str(a), str(b)).returncode == 0
    raw = run_bench("compare", str(a), str(b), "--raw")
    assert raw.returncode == 0 and "4 faster" in raw.stdout


@pytest.mark.parametrize("problem", ["missing", "world_size"])
def test_baseline_missing_or_not_comparable_exits_3(tmp_path, problem):
    a = make_run(tmp_path / "a")
    if problem == "missing":
        shutil.rmtree(a)
        a.mkdir()
        (a / "cells.jsonl").write_text("")
        proc = run_bench("--scenario", "smoke", "--baseline", str(tmp_path / "nope.json"))
        assert "nope.json" in proc.stderr
    else:
        b = make_run(tmp_path / "b", world_size=2)
        proc = run_bench("compare", str(a), str(b))
        assert "world_size=4, this run has 2" in proc.stderr
    assert proc.returncode == 3, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_report_rebuilds_everything_from_cells_jsonl(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(FIXTURE, run / "cells.jsonl")
    proc = run_bench("report", str(run))
    assert proc.returncode == 0, proc.stderr
    assert "Throughput and utilisation" in proc.stdout and "cumulative ladder" in proc.stdout.lower()
    report = (run / "report.md").read_text()
    assert "## Throughput and utilisation" in report and "## The seeds' tables, measured" in report
    assert len((run / "summary.csv").read_text().splitlines()) == 25
    for png in ("throughput.png", "step_times.png", "stall_breakdown.png"):
        assert (run / "plots" / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
