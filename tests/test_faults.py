"""Faults in a running matrix: a rank or a DataLoader worker killed from outside, a strategy that raises, a
rank that hangs, Ctrl-C and SIGTERM. The cell is recorded as failed with its cause and rank, fresh ranks run
the other cells, no process the run started survives, and --resume completes an interrupted matrix."""
from __future__ import annotations

import json
import os
import signal
import time

import pytest
from procs import cells, children, heartbeat, no_survivors, run_dir, start, wait_for
from scenarios_for_tests import write_scenario

from harness.results.cellresult import Figures

pytestmark = pytest.mark.slow  # every test here spawns rank processes

SMOKE = ("--scenario", "smoke", "--steps", "30", "--order", "fixed", "--quiet")  # the matrix's order: mmap second


def _kill_when_in_second_cell(proc, out, pick) -> tuple[int, float]:
    run = wait_for(lambda: run_dir(out), 120, "the run directory", proc)
    beat = wait_for(lambda: (b := heartbeat(run, 1)) and b["position"] == 1 and b, 180,
                    "rank 1 in the second cell", proc)
    victim = wait_for(lambda: pick(beat["pid"]), 60, "a process to kill", proc)
    os.kill(victim, signal.SIGKILL)
    return victim, time.monotonic()


def _worker_of(rank_pid: int) -> int | None:
    """A DataLoader worker of the rank: a child of its forkserver (a grandchild of the rank)."""
    for child in children(rank_pid):
        for grandchild in children(child):
            return grandchild
    return None


@pytest.mark.parametrize("target", ["rank", "worker"])
def test_a_killed_process_fails_its_cell_and_the_matrix_goes_on(tmp_path, data_dir, target):
    out = tmp_path / "out"
    proc, tag = start(*SMOKE, "--data-dir", str(data_dir), "--out", str(out))
    pick = (lambda pid: pid) if target == "rank" else _worker_of
    _, killed_at = _kill_when_in_second_cell(proc, out, pick)
    run = run_dir(out)
    wait_for(lambda: len(cells(run)) >= 2, 60, "the failed cell's line", proc)
    detected_s = time.monotonic() - killed_at
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 1, stderr[-2000:]
    first, failed, third = cells(run)
    assert first.error is None and third.error is None  # measured before and after
    assert first.figures.throughput > 0 and third.figures.throughput > 0
    expected = "rank 1 was killed by SIGKILL" if target == "rank" else "rank 1 exited with code 1"
    assert failed.error.startswith(expected), failed.error
    assert failed.figures == Figures() and failed.ranks == [] and failed.cell.startswith("storage=mmap")
    assert failed.world_size == 2 and failed.names == first.names | {"storage": "mmap"}  # its identity
    assert "1 cell(s) failed" in stderr and "storage=mmap" in stderr
    assert no_survivors(tag) == []
    assert detected_s < 30, detected_s
    print(f"{target} killed: failure recorded {detected_s:.1f} s later")


def _faulty(tmp_path, sampler: str, timeout: float = 0) -> str:
    return str(write_scenario(
        tmp_path / "faulty.toml", {"storage": ["mmap"], "sampler": ["default", sampler, "balanced"]},
        description="a sampler that fails on rank 1, between two good cells",
        training={"batch_size": 8, "image_size": 64, "warmup_steps": 1, "steps": 4, "workers": 0,
                  "cell_timeout_s": timeout}))


@pytest.mark.parametrize("sampler, expected", [
    ("crash", "rank 1 exited with code 1: RuntimeError: the crash sampler failed on purpose"),
    ("hang", "timeout: the cell did not finish within 20 s (cell_timeout_s)"),
])
def test_a_strategy_that_raises_or_hangs_fails_its_cell_only(tmp_path, data_dir, sampler, expected):
    out = tmp_path / "out"
    started = time.monotonic()
    proc, tag = start("--scenario", _faulty(tmp_path, sampler, 20), "--plugin", "tests.plugins.fault_strategies",
                      "--data-dir", str(data_dir), "--out", str(out), "--order", "fixed", "--quiet")
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 1, stderr[-2000:]
    good, failed, other = cells(run_dir(out))  # in the matrix's order: the faulty sampler between two good ones
    assert failed.name("sampler") == sampler
    assert good.error is None and other.error is None, (good.error, other.error)
    assert failed.error.startswith(expected), failed.error
    assert no_survivors(tag) == []
    print(f"{sampler}: whole run {time.monotonic() - started:.1f} s")


# Six cells, each with a DataLoader worker per rank: the signal goes on rank 0's first heartbeat in the second
# cell, so four cells are still to come even if the run moves on before the signal lands (on a busy machine the
# 3-cell smoke matrix once finished first, exit 0).
MANY = {"storage": ["raw", "mmap", "hdf5"], "sampler": ["default", "balanced"]}


@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_interrupt_keeps_results_builds_the_report_and_resume_completes(tmp_path, data_dir, signum, code):
    total = len(MANY["storage"]) * len(MANY["sampler"])
    path = write_scenario(tmp_path / "many.toml", MANY, training={"batch_size": 8, "image_size": 64,
                                                                  "warmup_steps": 1, "steps": 20, "workers": 1})
    out = tmp_path / "out"
    proc, tag = start("--scenario", str(path), "--order", "fixed", "--quiet", "--data-dir", str(data_dir),
                      "--out", str(out))
    run = wait_for(lambda: run_dir(out), 120, "the run directory", proc)
    wait_for(lambda: (b := heartbeat(run, 0)) and b["position"] == 1, 180, "the second cell", proc)
    sent = time.monotonic()
    os.kill(proc.pid, signum)
    stdout, stderr = proc.communicate(timeout=120)
    stopped_s = time.monotonic() - sent
    done = cells(run)
    assert len(done) < total, f"no cell was left when the signal came: {len(done)} of {total} done"
    assert proc.returncode == code, stderr[-2000:]
    assert f"--resume {run}" in stderr
    assert len(done) >= 1  # the first cell's line kept
    assert all(line.error is None for line in done)  # the interrupted cell is not recorded as failed
    assert (run / "report.md").exists()
    assert no_survivors(tag) == []
    print(f"{signal.Signals(signum).name}: stopped {stopped_s:.1f} s after the signal, "
          f"{total - len(done)} of {total} cells left")
    if signum != signal.SIGINT:
        return
    resumed, tag = start("--resume", str(run), "--quiet")
    _, stderr = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, stderr[-2000:]
    lines = cells(run)
    assert len(lines) == total and len({line.cell for line in lines}) == total
    assert all(line.error is None for line in lines)
    assert no_survivors(tag) == []


# A budgeted run of three cells (the budget's first pass is the planned one, its second always runs: one pass
# decides nothing). Positions 0-2 are pass 1; position 3 on is a budget pass.
BUDGETED = {"storage": ["raw", "mmap", "hdf5"]}
BUDGET_TRAINING = {"batch_size": 8, "image_size": 64, "warmup_steps": 1, "steps": 6, "workers": 0}


def _budgeted(tmp_path, data_dir, budget: str) -> tuple:
    path = write_scenario(tmp_path / "budgeted.toml", BUDGETED, training=BUDGET_TRAINING)
    out = tmp_path / "out"
    proc, tag = start("--scenario", str(path), "--budget", budget, "--order", "fixed", "--quiet",
                      "--data-dir", str(data_dir), "--out", str(out))
    return proc, tag, wait_for(lambda: run_dir(out), 120, "the run directory", proc)


def test_a_budgeted_run_killed_in_its_second_pass_resumes_the_cut_pass_then_the_budget(tmp_path, data_dir):
    proc, tag, run = _budgeted(tmp_path, data_dir, "120")
    wait_for(lambda: any(c.repeat == 1 for c in cells(run)), 300, "the second pass's first line", proc)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert no_survivors(tag, timeout=10) == []
    cut = sorted(c.cell for c in cells(run) if c.repeat == 1)
    assert 1 <= len(cut) < 3, cut
    state_path = run / "budget.json"  # the budget's state, as the run left it
    state = json.loads(state_path.read_text()) if state_path.exists() else {"budget_s": 120.0}
    if state_path.exists():  # its clock spent: the resume finishes the cut pass and starts no other
        state_path.write_text(json.dumps({**state, "spent_s": state["budget_s"]}))
    resumed, tag = start("--resume", str(run), "--quiet")
    _, stderr = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, stderr[-2000:]
    lines = cells(run)
    assert sorted(c.cell for c in lines if c.repeat == 1) == sorted(c.cell for c in lines if c.repeat == 0), \
        [(c.cell, c.repeat) for c in lines]
    assert len(lines) == 6 and all(c.error is None for c in lines)  # the cut pass finished, nothing else
    assert json.loads(state_path.read_text())["spent_s"] >= state["budget_s"]  # the clock went on
    assert no_survivors(tag) == []


def test_a_rank_killed_in_a_budget_pass_is_an_error_line_and_exit_1(tmp_path, data_dir):
    proc, tag, run = _budgeted(tmp_path, data_dir, "90")
    beat = wait_for(lambda: (b := heartbeat(run, 1)) and b["position"] >= 3 and b, 300, "a budget pass", proc)
    os.kill(beat["pid"], signal.SIGKILL)
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 1, stderr[-2000:]
    failed = [c for c in cells(run) if c.error]
    assert len(failed) == 1 and failed[0].repeat >= 1, [(c.cell, c.repeat, c.error) for c in cells(run)]
    assert failed[0].error.startswith("rank 1 was killed by SIGKILL") and failed[0].cell == beat["cell"]
    assert "1 cell(s) failed" in stderr
    repeat = failed[0].repeat  # fresh ranks finished its pass
    assert {c.cell for c in cells(run) if c.repeat == repeat} == {c.cell for c in cells(run) if c.repeat == 0}
    assert no_survivors(tag) == []


def _descendants(pid: int) -> set[int]:
    out, todo = set(), [pid]
    while todo:
        for child in children(todo.pop()):
            out.add(child)
            todo.append(child)
    return out


@pytest.mark.parametrize("moment", ["ranks starting", "mid-cell"])
def test_sigkill_of_the_launcher_leaves_no_process(tmp_path, data_dir, moment):
    """SIGKILL runs no handler: every process the run started (ranks, their forkservers and DataLoader
    workers, the resource tracker) must still end within seconds."""
    out = tmp_path / "out"
    proc, tag = start(*SMOKE, "--data-dir", str(data_dir), "--out", str(out))
    run = wait_for(lambda: run_dir(out), 120, "the run directory", proc)
    if moment == "ranks starting":  # the ranks exist but have not yet run any of their own code
        wait_for(lambda: len(_descendants(proc.pid)) >= 3, 120, "the ranks", proc)
    else:  # a DataLoader worker of rank 1 at work (a child of its forkserver)
        beat = wait_for(lambda: (b := heartbeat(run, 1)) and b, 180, "rank 1 in a cell", proc)
        wait_for(lambda: _worker_of(beat["pid"]), 60, "rank 1's DataLoader worker", proc)
    before = _descendants(proc.pid)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    left = no_survivors(tag, timeout=8)
    assert left == [], (sorted(before), {p: children(p) for p in left})
