"""The hard edges of a real run (slow: each starts run_bench.py and its ranks): a full or read-only data
directory, Ctrl-C and SIGTERM in the middle of a cell (no "leaked semaphore objects" from the resource
tracker), and --resume of a run whose last line was cut."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, run_bench
from scenarios_for_tests import write_scenario

pytestmark = pytest.mark.slow

TRAINING = {"batch_size": 4, "image_size": 32, "warmup_steps": 1}


def one_line(proc, message: str) -> str:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert message in line, line
    return line


@pytest.fixture
def mount(tmp_path):
    """mount(options) -> a fresh tmpfs mounted with those options (root only; skipped elsewhere)."""
    mounted = []

    def make(options: str) -> Path:
        if os.geteuid() != 0:
            pytest.skip("mounting a small tmpfs needs root")
        where = tmp_path / f"mnt{len(mounted)}"
        where.mkdir()
        if subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)]).returncode:
            pytest.skip("cannot mount a tmpfs here")
        mounted.append(where)
        return where

    yield make
    for where in mounted:
        subprocess.run(["umount", "-l", str(where)])


@pytest.mark.parametrize("storage", ["mmap", "raw"])
def test_a_full_data_disk_is_one_line_before_anything_is_written(tmp_path, mount, storage):
    disk = mount("size=2m")
    proc = run_bench("--scenario", "smoke", "--only", f"storage={storage}", "--data-dir", str(disk),
                     "--out", str(tmp_path / "out"), "--quiet")
    line = one_line(proc, f"--data-dir {disk}: the datasets to write need about ")
    assert "bytes free" in line and f"({storage} " in line
    assert not list(disk.glob("*.tmp-*")) and not (tmp_path / "out").exists()


def test_a_read_only_data_dir_is_one_line(tmp_path, mount):
    disk = mount("size=1m,ro")
    proc = run_bench("--scenario", "smoke", "--data-dir", str(disk), "--out", str(tmp_path / "out"), "--quiet")
    one_line(proc, f"data directory {disk} is not writable (Read-only file system); pass --data-dir")


def test_a_disk_that_fills_while_writing_is_one_usage_error(tmp_path, mount, monkeypatch):
    """The estimate can be wrong (or another process fills the disk): a real ENOSPC from the kernel."""
    from harness.data import materialise, space
    from harness.data.generator import DatasetSpec
    from harness.errors import UsageError

    disk = mount("size=2m")
    monkeypatch.setattr(space, "free_bytes", lambda path: 10**12)  # the check passes; the disk is full anyway
    with pytest.raises(UsageError, match=r"writing the raw dataset failed \(No space left on device"):
        materialise.materialise(DatasetSpec(samples=256, profile="tiny"), "raw", disk, progress=False)
    assert not list(disk.glob("*.tmp-*")) and not list(disk.glob("*-raw"))


@pytest.fixture(scope="module")
def long_scenario(tmp_path_factory) -> tuple[Path, Path]:
    """A cell long enough to be interrupted in (2 DataLoader workers per rank, the shared cache server) and
    its data directory, materialised once."""
    root = tmp_path_factory.mktemp("long")
    matrix = {"storage": ["mmap"], "cache": [{"name": "lru", "capacity_mb": 8, "scope": "shared"}]}
    path = write_scenario(root / "long.toml", matrix, training={**TRAINING, "steps": 5000, "workers": 2})
    return path, root / "data"


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_an_interrupted_run_leaks_no_semaphore(tmp_path, long_scenario, signum):
    path, data = long_scenario
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, str(REPO / "run_bench.py"), "--scenario", str(path), "--data-dir",
                             str(data), "--out", str(out), "--quiet"], cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None:  # until both ranks are a few steps into the cell
        steps = [json.loads(b.read_text()).get("step", 0) for b in out.glob("*/.ranks/rank*.json")
                 if b.stat().st_size]
        if len(steps) == 2 and min(steps) >= 3:
            break
        time.sleep(0.2)
    assert proc.poll() is None, proc.communicate()[1]
    if signum == signal.SIGINT:
        os.killpg(proc.pid, signal.SIGINT)  # a terminal's Ctrl-C goes to the whole foreground group
    else:
        os.kill(proc.pid, signal.SIGTERM)
    err = proc.communicate(timeout=120)[1]
    assert proc.returncode == 128 + signum, err
    assert ("interrupted (SIGINT)" if signum == signal.SIGINT else "terminated (SIGTERM)") in err
    assert "leaked semaphore" not in err and "resource_tracker" not in err, err
    assert "Traceback" not in err, err


def test_resume_of_a_run_whose_last_line_was_cut_warns(tmp_path):
    training = {**TRAINING, "steps": 2, "workers": 0}
    path = write_scenario(tmp_path / "short.toml", {"storage": ["mmap"]}, training=training)
    argv = ["--scenario", str(path), "--data-dir", str(tmp_path / "data"), "--out", str(tmp_path / "out"),
            "--quiet"]
    first = run_bench(*argv)
    assert first.returncode == 0, first.stderr
    (run,) = (tmp_path / "out").iterdir()
    cells = run / "cells.jsonl"
    whole = cells.read_text()
    cells.write_text(whole + whole.splitlines()[0][:60])  # a line cut by a crash mid-write
    again = run_bench("--resume", str(run), "--quiet")
    assert again.returncode == 0, again.stderr
    warnings = [line for line in again.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1, again.stderr
    assert f"{cells}:2: the last line is cut off" in warnings[0]
    assert cells.read_text() == whole  # the cut line is gone, the whole ones kept
