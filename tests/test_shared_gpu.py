"""Several ranks on one GPU: --share-gpu runs them over gloo on the visible GPU (emulated, with a note, where
there is none); under NCCL two ranks on one GPU are one line naming them, found by comparing the GPUs' UUIDs
through the rendezvous store before NCCL's init; the scaling table refuses two runs on different devices, or
one real and one emulated (a 1-GPU host runs 1xV100 on its GPU and 4xV100 emulated)."""
from __future__ import annotations

import json
import os
import tempfile
import threading
import time
from dataclasses import astuple, replace
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from harness.device.devices import ranks_per_gpu
from harness.errors import UsageError
from harness.report.articles import scaling_table
from harness.results.cellresult import CellResult
from harness.run.launch import check_distinct_gpus, choose_device, free_port, training_backend

FIXTURES = Path(__file__).parent / "fixtures"


def test_share_gpu_puts_any_number_of_ranks_on_one_gpu_over_gloo():
    assert choose_device("auto", 4, gpus=1, share_gpu=True) == "cuda"
    assert choose_device("cuda", 4, gpus=1, share_gpu=True) == "cuda"
    assert choose_device("auto", 4, gpus=1, torchrun_local_ranks=4, share_gpu=True) == "cuda"
    assert training_backend("cuda", share_gpu=True) == "gloo"
    assert training_backend("cuda") == "nccl" and training_backend("emulated") == "gloo"
    assert [ranks_per_gpu(4, 1), ranks_per_gpu(4, 2), ranks_per_gpu(3, 2), ranks_per_gpu(1, 8)] == [4, 2, 2, 1]


def test_without_share_gpu_one_gpu_serves_one_rank():
    assert choose_device("auto", 4, gpus=1) == "emulated"
    with pytest.raises(UsageError, match="pass --share-gpu to run the ranks over gloo"):
        choose_device("cuda", 4, gpus=1)


def test_share_gpu_without_a_gpu_is_emulated_with_a_note(capsys):
    assert choose_device("auto", 2, gpus=0, share_gpu=True) == "emulated"
    assert "--share-gpu: no GPU is visible, so the 2 ranks are emulated" in capsys.readouterr().err
    with pytest.raises(UsageError, match="--share-gpu with --device cuda, but no GPU is visible"):
        choose_device("cuda", 2, gpus=0, share_gpu=True)


def _check_over_a_store(uuids: list[str]) -> list[str | None]:
    """Each rank (a thread with its own client of one real TCPStore) runs the check; what each raised."""
    port = free_port()
    master = dist.TCPStore("127.0.0.1", port, len(uuids), True, timeout=timedelta(seconds=10),
                           wait_for_workers=False)
    errors: list[str | None] = [None] * len(uuids)

    def rank(r: int) -> None:
        store = dist.TCPStore("127.0.0.1", port, len(uuids), False, timeout=timedelta(seconds=10))
        try:
            check_distinct_gpus(dist.PrefixStore("dlbench_gpus", store), r, len(uuids), uuids[r],
                                "NVIDIA H200 on node1")
        except UsageError as err:
            errors[r] = str(err)

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(len(uuids))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    del master
    return errors


def test_two_ranks_on_one_gpu_under_nccl_are_one_line_on_every_rank():
    errors = _check_over_a_store(["GPU-aaaa", "GPU-bbbb", "GPU-aaaa"])
    assert errors[0] == errors[1] == errors[2]
    assert errors[0] == ("ranks 0 and 2 would drive the same GPU (NVIDIA H200 on node1, GPU-aaaa): NCCL needs a "
                         "GPU per rank; start at most as many ranks per node as it has GPUs, or pass --share-gpu "
                         "to run the ranks over gloo on the GPUs there are")
    assert "\n" not in errors[0]


def test_distinct_gpus_pass_the_check():
    assert _check_over_a_store(["GPU-aaaa", "GPU-bbbb"]) == [None, None]


def _load(name: str) -> list[CellResult]:
    return [CellResult.from_json(json.loads(line)) for line in (FIXTURES / name).read_text().splitlines()]


def test_the_scaling_table_refuses_a_real_and_an_emulated_run():
    one, four = _load("cells_1xV100.jsonl"), _load("cells_4xV100.jsonl")
    real_one = [replace(c, device="Tesla V100-SXM2-16GB", emulated=False) for c in one]
    title, headers, rows, _ = astuple(scaling_table(real_one, four))
    assert title == "Scaling: 1 vs 4 ranks: refused" and headers == ["why"]
    assert rows == [["the smaller run is on Tesla V100-SXM2-16GB, the larger on V100-16GB (emulated): efficiency "
                     "needs the same device, both real or both emulated; rerun one of them on the other's device"]]
    assert "refused" not in scaling_table(one, four).title  # the same device: the table as before


def test_the_scaling_table_refuses_ranks_sharing_a_gpu_against_one_rank_on_it():
    one, four = _load("cells_1xV100.jsonl"), _load("cells_4xV100.jsonl")
    gpu_one = [replace(c, device="NVIDIA H200", emulated=False) for c in one]
    shared_four = [replace(c, device="NVIDIA H200, 4 ranks per GPU", emulated=False) for c in four]
    table = scaling_table(gpu_one, shared_four)
    assert table.title.endswith("refused")
    assert "the larger on NVIDIA H200, 4 ranks per GPU" in table.rows[0][0]


def _joining_rank(rank: int, port: int, uuids: list[str], out: str) -> None:
    """A spawned rank joining as harness.run.launch does under NCCL (gloo standing in): the GPU check on the
    rendezvous store first, then the group."""
    from harness.run.launch import join_with_gpus

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    result = {}
    try:
        join_with_gpus("gloo", rank, len(uuids), (uuids[rank], "NVIDIA H200 on node1"))
        t = torch.ones(1)
        dist.all_reduce(t)
        result["sum"] = t.item()
    except UsageError as err:
        result.update(error=str(err), group_made=dist.is_initialized())
    Path(out, f"rank{rank}.json").write_text(json.dumps(result))
    os._exit(0)


def _join(uuids: list[str]) -> list[dict]:
    with tempfile.TemporaryDirectory() as out:
        ctx = mp.start_processes(_joining_rank, args=(free_port(), uuids, out), nprocs=len(uuids), join=False,
                                 start_method="spawn")
        deadline = time.monotonic() + 60
        while not ctx.join(timeout=0.2) and time.monotonic() < deadline:
            pass
        return [json.loads(Path(out, f"rank{r}.json").read_text()) for r in range(len(uuids))]


@pytest.mark.slow  # spawns rank processes
def test_ranks_compare_their_gpus_on_the_rendezvous_store_before_the_group_is_made():
    same = _join(["GPU-aaaa", "GPU-aaaa"])
    assert [r.get("group_made") for r in same] == [False, False]  # stopped before init_process_group
    assert all(r["error"].startswith("ranks 0 and 1 would drive the same GPU (NVIDIA H200 on node1, GPU-aaaa)")
               for r in same), same
    assert _join(["GPU-aaaa", "GPU-bbbb"]) == [{"sum": 2.0}, {"sum": 2.0}]
