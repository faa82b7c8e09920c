"""The per-step agreement runs on the host's gloo group (a CPU tensor: on CUDA the host never waits for the
GPU's stream there, where an NCCL allreduce's .tolist() did): agree(group=...) reduces over that group's
ranks alone, and waits at most its own timeout, not the host group's hours; on real gloo ranks."""
from __future__ import annotations

import json
import os
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import pytest
import torch.distributed as dist
import torch.multiprocessing as mp

pytestmark = pytest.mark.slow  # spawns rank processes

TIMEOUT_S = 20


def _rank(rank: int, world: int, port: int, out: str) -> None:
    from harness.train.agreement import agree

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=TIMEOUT_S))
    pair = dist.new_group(ranks=[0, 1], backend="gloo", timeout=timedelta(seconds=TIMEOUT_S))
    slow = dist.new_group(ranks=[0, 1], backend="gloo", timeout=timedelta(hours=2))  # as the host group's
    result = {}
    try:
        if rank < 2:  # rank 2 is busy elsewhere: an agreement on the default group would wait for it
            result["agreed"] = agree(rank, 10 - rank, group=pair)
        if rank == 0:  # rank 1 never joins this one: the agreement must give up after its own timeout
            started = time.monotonic()
            try:
                agree(1, group=slow, timeout=timedelta(seconds=2))
            except RuntimeError as err:
                result["gave_up"] = [round(time.monotonic() - started, 1), str(err)[:80]]
    except Exception as err:  # noqa: BLE001 - what the test reads
        result["raised"] = f"{type(err).__name__}: {str(err)[:200]}"
    if rank == 1:
        time.sleep(TIMEOUT_S)  # alive, not joining: rank 0's wait ends by its timeout, not by this exit
    Path(out, f"rank{rank}.json").write_text(json.dumps(result))
    os._exit(0)


def test_the_agreement_reduces_over_the_group_it_is_given():
    from harness.run.launch import free_port

    with tempfile.TemporaryDirectory() as out:
        ctx = mp.start_processes(_rank, args=(3, free_port(), out), nprocs=3, join=False, start_method="spawn")
        deadline = time.monotonic() + 4 * TIMEOUT_S
        while not ctx.join(timeout=0.2) and time.monotonic() < deadline:
            pass
        r0, r1 = (json.loads(Path(out, f"rank{r}.json").read_text()) for r in range(2))
    assert r0["agreed"] == r1["agreed"] == [1, 10], (r0, r1)
    assert r0["gave_up"][0] < TIMEOUT_S / 2, r0  # 2 s asked, the group's own timeout 2 h
