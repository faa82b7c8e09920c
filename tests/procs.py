"""Helpers of the fault tests: start run_bench.py with a tag in its environment (every process it starts
inherits it), find the tagged processes by walking /proc, wait for a run's heartbeats."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

from harness.results import rundir
from harness.results.cellresult import CellResult

REPO = Path(__file__).resolve().parent.parent


def start(*args: str, tag: str | None = None) -> tuple[subprocess.Popen, str]:
    tag = tag or uuid.uuid4().hex
    env = {**os.environ, "DLBENCH_TEST_TAG": tag}
    proc = subprocess.Popen([sys.executable, str(REPO / "run_bench.py"), *args], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    return proc, tag


def tagged_pids(tag: str) -> list[int]:
    """Live processes (zombies excluded) whose environment carries the tag."""
    needle = f"DLBENCH_TEST_TAG={tag}".encode()
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if needle not in Path(f"/proc/{entry}/environ").read_bytes().split(b"\0"):
                continue
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            out.append(int(entry))
    return out


def children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def wait_for(predicate, timeout: float, what: str, proc: subprocess.Popen | None = None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = predicate()
        if got:
            return got
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"run_bench.py ended (rc {proc.returncode}) before {what}: "
                                 f"{proc.stderr.read()[-2000:]}")
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def run_dir(out: Path) -> Path | None:
    dirs = list(Path(out).glob("*")) if Path(out).exists() else []
    return dirs[0] if len(dirs) == 1 and (dirs[0] / "env.json").exists() else None


def heartbeat(run: Path, rank: int) -> dict | None:
    try:
        return json.loads((run / ".ranks" / f"rank{rank}.json").read_text())
    except (OSError, ValueError):
        return None


def cells(run: Path) -> list[CellResult]:
    """The run's cells.jsonl as CellResults ([] before it exists; a line cut while written is skipped)."""
    return rundir.read_results(run)


def no_survivors(tag: str, timeout: float = 15) -> list[int]:
    """The tagged processes still alive after up to `timeout` s (DataLoader workers notice their parent's
    death within a few seconds; the launcher kills the rest at once)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = tagged_pids(tag)
        if not left:
            return []
        time.sleep(0.2)
    return tagged_pids(tag)
