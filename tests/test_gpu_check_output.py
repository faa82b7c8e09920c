"""scripts/gpu_check.sh's output and limits, on a machine without a GPU: OUT receives the summary and one
archive and nothing else (the device machine hands back few files and no deep folders), the work folder
lives outside OUT and is removed; the stage limits add up to under 540 s (the device runs one command for
at most 600) with the preflight at 40 s; the profile stage's steps are sized by time from a run's steps."""
from __future__ import annotations

import importlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_check.sh"
CHECKS = ROOT / "scripts" / "gpu"
BASH = shutil.which("bash")
pytestmark = pytest.mark.skipif(BASH is None, reason="needs bash")


def limits() -> dict[str, int]:
    table = re.search(r"declare -A LIMIT=\((.*?)\)\n", SCRIPT.read_text(), re.S).group(1)
    return {k: int(v) for k, v in re.findall(r"\[(\w+)\]=(\d+)", table)}


def test_the_stage_limits_add_up_to_under_540_s():
    got = limits()
    assert sum(got.values()) < 540, got
    assert got["preflight"] >= 40  # a cold import of torch, CUDA and matplotlib gates every stage
    assert re.search(r"^BUDGET_S=540$", SCRIPT.read_text(), re.M)


def test_the_script_refuses_limits_that_reach_the_budget(tmp_path):
    """The script's own guard: a table whose sum is not under BUDGET_S stops it before any stage."""
    copy = tmp_path / "scripts" / "gpu_check.sh"
    copy.parent.mkdir()
    over = 540 - sum(limits().values()) + limits()["events"]
    copy.write_text(re.sub(r"\[events\]=\d+", f"[events]={over}", SCRIPT.read_text(), count=1))
    done = subprocess.run([BASH, str(copy), "--dry-run", str(tmp_path / "out")], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2 and "not under the budget of 540 s" in done.stderr, done.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.slow  # runs the script with bash: one stage, a few seconds to tens of seconds
@pytest.mark.parametrize("mode, stage", [("--dry-run", "matrix"), (None, "events")])
def test_out_holds_the_summary_and_one_archive_only(tmp_path, mode, stage):
    out, tmp = tmp_path / "out", tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHON": sys.executable, "TMPDIR": str(tmp),
           "GPU_CHECK_STAGES": stage}
    subprocess.run([BASH, str(SCRIPT), *([mode] if mode else []), str(out)], env=env, capture_output=True,
                   text=True, timeout=300)
    assert sorted(p.name for p in out.iterdir()) == ["gpu-check.tar.gz", "summary.txt"]
    with tarfile.open(out / "gpu-check.tar.gz") as archive:
        names = archive.getnames()
        log = archive.extractfile(f"gpu-check/{stage}.log").read().decode()
        summary = archive.extractfile("gpu-check/summary.txt").read().decode()
    assert all(n == "gpu-check" or n.startswith("gpu-check/") for n in names), names
    assert {"gpu-check/json", "gpu-check/runs", "gpu-check/scenarios"} <= set(names)
    assert log.startswith(f"== {stage} (timeout ")
    assert summary == (out / "summary.txt").read_text()
    assert re.search(rf"^{stage} +(PASS|SKIP) ", summary, re.M), summary
    assert not list(tmp.glob("dlbench-gpu-work.*"))  # the work folder is removed


def check_run():
    if str(CHECKS) not in sys.path:
        sys.path.insert(0, str(CHECKS))
    return importlib.import_module("check_run")


def write_cells(folder: Path, steps_s: dict[str, list[float]]) -> Path:
    from harness.measure.rankrecord import RankRecord
    from harness.results.cellresult import CellResult, Figures

    run = folder / "20260101T000000Z-gpu"
    run.mkdir(parents=True)
    lines = [CellResult(cell=f"storage=mmap,precision={name}", figures=Figures(throughput=1.0),
                        ranks=[RankRecord(rank=0, step=steps)]).to_json() for name, steps in steps_s.items()]
    (run / "cells.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return run


def test_the_profile_steps_are_sized_by_time(tmp_path, capsys):
    """At the fastest cell's median step (10 ms here; the fp32 cell's 40 ms is not it): 6 s / 10 ms = 600."""
    cr = check_run()
    write_cells(tmp_path, {"amp": [0.011, 0.010, 0.009, 0.010, 0.5], "fp32": [0.04] * 5})
    assert cr.main([str(tmp_path), "--steps-for-window", "6", "--steps-between", "100", "1500"]) == 0
    assert capsys.readouterr().out.strip() == "600"
    assert cr.steps_for_window(0.001, 6, 100, 1500) == 1500  # bounded above: the stage's limit
    assert cr.steps_for_window(0.2, 6, 100, 1500) == 100  # and below
    assert cr.steps_for_window(0.007, 6, 100, 1500) == 858  # 857 steps would make 5.999 s


def test_no_steps_to_time_is_exit_2_and_the_script_falls_back(tmp_path, capsys):
    assert check_run().main([str(tmp_path), "--steps-for-window", "6"]) == 2
    assert capsys.readouterr().out == ""
    text = SCRIPT.read_text()
    assert int(re.search(r"^PROFILE_WINDOW_S=(\d+)$", text, re.M).group(1)) >= 4  # well above NVML's 2 s
    assert 'steps=$(profile_steps)' in text and '--steps-for-window "$PROFILE_WINDOW_S"' in text
