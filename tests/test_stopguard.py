"""The stop guard of a torchrun rank: after SIGTERM the ending runs once, whether the main thread unwinds in
time or is held in a real gloo collective whose peer never comes (no Python signal handler runs there), and a
second SIGTERM during the ending (Slurm's and torchrun's) does not cut it short."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from harness.run.launch import free_port

pytestmark = pytest.mark.slow  # real gloo rank processes

RANK = textwrap.dedent("""
    import os, signal, sys, threading, time
    from pathlib import Path
    import torch.distributed as dist
    from harness.run import stopguard, supervisor

    rank, out, mode = int(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    dist.init_process_group("gloo", rank=rank, world_size=2)
    if rank == 1:
        time.sleep(60)  # joined the group, never joins the barrier
    signal.signal(signal.SIGTERM, supervisor.raise_interrupted)

    def ending(code):
        if mode == "twice":  # Slurm's SIGTERM and torchrun's: the second arrives during the ending
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.2)
        with open(out, "a") as f:
            where = "main" if threading.current_thread() is threading.main_thread() else "guard"
            f.write(f"ending {code} in {where}\\n")

    guard = stopguard.StopGuard(ending, grace_s=1.0)
    print("ready", flush=True)
    try:
        if mode == "held":
            dist.barrier()  # rank 1 never comes: held in C++ until the guard ends the process
        else:
            time.sleep(60)
    except supervisor.Interrupted as err:
        guard.end(err.code)
        os._exit(err.code)
""")


def _start(tmp_path: Path, mode: str) -> tuple[subprocess.Popen, subprocess.Popen, Path]:
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    out = tmp_path / "ending.txt"
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
           "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    peer = subprocess.Popen([sys.executable, str(script), "1", str(out), mode], env=env)
    rank0 = subprocess.Popen([sys.executable, str(script), "0", str(out), mode], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert rank0.stdout.readline().strip() == "ready"
    return rank0, peer, out


def _stop(rank0: subprocess.Popen, peer: subprocess.Popen) -> tuple[int, str]:
    time.sleep(0.5)  # into the barrier
    rank0.send_signal(signal.SIGTERM)
    try:
        _, err = rank0.communicate(timeout=30)
    finally:
        peer.kill()
        peer.wait()
    return rank0.returncode, err


def test_a_rank_held_in_a_collective_still_runs_its_ending_and_exits_143(tmp_path):
    rank0, peer, out = _start(tmp_path, "held")
    code, err = _stop(rank0, peer)
    assert code == 143
    assert out.read_text() == "ending 143 in guard\n"
    assert "still unwinding 1 s after SIGTERM" in err
    assert "barrier" in err  # where the main thread was held


@pytest.mark.parametrize("mode", ["sleeping", "twice"])
def test_a_rank_that_unwinds_in_time_runs_its_ending_once_in_the_main_thread(tmp_path, mode):
    rank0, peer, out = _start(tmp_path, mode)
    code, err = _stop(rank0, peer)
    assert code == 143
    assert out.read_text() == "ending 143 in main\n"
    assert "still unwinding" not in err
