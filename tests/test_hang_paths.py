"""The hang and crash paths of a multi-rank step, each on real gloo ranks with an injected error: a shadow step
after an OOM runs on a tiny batch; a shadow step, a finish_reduction or a distributed-backend error that fails
aborts the group and the failing rank's peer ends within seconds (never the group's timeout); a
DistBackendError reading "Cuda failure 'out of memory'" is no OOM; the memory probe's failure is agreed; the
failed step's graph is freed before the shadow step; only steps that raised count as OOM events.

Each case spawns its ranks (harness.run.launch.free_port), which run the harness's own MeasuredLoop on batches
held in memory, with a process-group timeout of GROUP_TIMEOUT_S: a peer that waited for it would miss the
PEER_END_S bound by far.
"""
from __future__ import annotations

import json
import os
import tempfile
import time
import weakref
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

pytestmark = pytest.mark.slow  # every case spawns rank processes

GROUP_TIMEOUT_S = 60
PEER_END_S = 15  # the failing rank's peer ends within this after the failure (the group's timeout is 60 s)
BATCH = 8


class Ranks:
    """A source of batches that runs dry after `n` (a rank whose epoch is over), as BatchSource does."""

    def __init__(self, n: int):
        g = torch.Generator().manual_seed(0)
        self.batches = [{"index": torch.arange(i * BATCH, (i + 1) * BATCH), "nbytes": 0, "cache_stats": None,
                         "padded_pixels": 0, "real_pixels": 0, "image_emb": torch.randn(BATCH, 16, generator=g)}
                        for i in range(n)]
        self.i, self.consumed, self.completed_epochs = 0, {}, 0

    def next(self):
        self.i += 1
        return self.batches[self.i - 1] if self.i <= len(self.batches) else None

    def new_epoch(self) -> None:
        self.i = 0

    def loader_thread_cpu_s(self) -> float:
        return 0.0

    def close(self) -> None:
        pass


class Net(nn.Module):
    """Three linear layers; on rank 1 `fits` samples at most (more: torch.OutOfMemoryError, as a GPU that
    ran out), an optional failure in forward at one step, and a weak reference to each forward's activation."""

    def __init__(self, fits: int = 1 << 30, fail_forward_at: int = 0):
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b, self.c = nn.Linear(16, 64), nn.Linear(64, 64), nn.Linear(64, 4)
        self.fits, self.fail_forward_at, self.calls = fits, fail_forward_at, 0
        self.activations: list[weakref.ref] = []

    def forward(self, batch: dict) -> torch.Tensor:
        self.calls += 1
        x = batch["image_emb"]
        if len(x) > self.fits:
            raise torch.OutOfMemoryError(f"{len(x)} samples do not fit in {self.fits}")
        h = torch.relu(self.a(x))
        self.activations.append(weakref.ref(h))
        if self.calls == self.fail_forward_at:
            raise RuntimeError("injected failure in the forward")
        return self.c(torch.relu(self.b(h))).pow(2).mean()


class Batching:
    def __init__(self, split: bool):
        self.splits_on_oom = split

    def observe(self, fraction: float) -> None:
        pass


def _device():
    from harness.config.accelerators import get_accelerator
    from harness.device.devices import EmulatedDevice

    return EmulatedDevice(get_accelerator("V100-16GB"), "features")


def _loop(device, ddp, steps: int, batches: int, split: bool):
    from harness.train.measuredloop import MeasuredLoop

    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    return MeasuredLoop(device, ddp, opt, Ranks(batches), Batching(split), 0, steps)


def _run_loop(loop) -> None:
    from harness.measure.telemetry import MemorySampler, NvmlSampler

    with MemorySampler() as memory, NvmlSampler(None) as nvml:
        loop.run(memory, nvml)


def _make_ddp(model):
    from harness.train.ddpstep import make_ddp

    return make_ddp(model, bucket_cap_mb=0.01)  # several buckets: a failure part-way leaves some unlaunched


# ---- the cases, run on every rank: each returns what the test reads -------------------------------------

def case_tiny_shadow(rank: int) -> dict:
    """Rank 1 runs dry after 2 batches; its batch of 8 fits only split (4 at most). Its shadow steps must
    not feed the model that batch again."""
    model = Net(fits=4 if rank == 1 else 1 << 30)
    ddp = _make_ddp(model)
    loop = _loop(_device(), ddp, steps=4, batches=4 if rank == 0 else 2, split=True)
    _run_loop(loop)
    from harness.train.agreement import param_digest

    return {"steps": loop.step, "shadow": loop.shadow_steps, "oom_events": loop.oom_events,
            "error": loop.error, "digest": param_digest(model)}


def case_shadow_fails(rank: int) -> dict:
    """Rank 1 runs dry after 1 batch and its shadow step raises: the peer waits in the allreduce it joins."""
    device = _device()
    if rank == 1:
        begin = device.begin_step

        def begin_step(samples: int, pixels: int) -> float:
            if samples == 0:
                raise RuntimeError("injected failure in the shadow step")
            return begin(samples, pixels)

        device.begin_step = begin_step
    _run_loop(_loop(device, _make_ddp(Net()), steps=4, batches=4 if rank == 0 else 1, split=True))
    return {}


class _FailBackward(torch.autograd.Function):
    """Identity; its backward raises once armed (part-way down the gradients)."""

    @staticmethod
    def forward(ctx, x, state):
        ctx.state = state
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        if ctx.state["fire"]:
            ctx.state["fire"], ctx.state["fired"] = False, True
            raise RuntimeError("injected failure in the backward")
        return grad, None


class MidBackwardNet(Net):
    """Rank 1: the backward fails part-way at step 2 (after the last layer's buckets were launched)."""

    def __init__(self, state: dict):
        super().__init__()
        self.state = state

    def forward(self, batch: dict) -> torch.Tensor:
        self.calls += 1
        self.state["fire"] = self.state["armed"] and self.calls == 2
        h = _FailBackward.apply(torch.relu(self.a(batch["image_emb"])), self.state)
        return self.c(torch.relu(self.b(h))).pow(2).mean()


def _failing_hook(state: dict, error):
    """A comm hook that passes buckets on until `state` says to fail, then raises `error`."""
    def hook(_unused, bucket):
        if state["hook"]:
            raise error
        return dist.all_reduce(bucket.buffer(), async_op=True).get_future().then(lambda f: f.value()[0])
    return hook


def case_finish_reduction_fails(rank: int) -> dict:
    """Rank 1's backward fails part-way (not an OOM); its finish_reduction then fails too (the reduction
    raises): the peer waits for buckets this rank cannot launch."""
    state = {"armed": rank == 1, "fire": False, "fired": False, "hook": False}
    ddp = _make_ddp(MidBackwardNet(state))
    error = RuntimeError("injected failure in the reduction")

    def hook(unused, bucket):
        state["hook"] = state["fired"]  # after the backward's failure: finish_reduction's buckets fail
        return _failing_hook(state, error)(unused, bucket)

    ddp.register_comm_hook(None, hook)
    _run_loop(_loop(_device(), ddp, steps=4, batches=4, split=True))
    return {}


def case_backend_error(rank: int) -> dict:
    """NCCL's failed bucket launch, as a DistBackendError whose text says "out of memory", on rank 1 at
    step 2, with splitting on: no OOM, no finish_reduction on the broken communicator; the group aborted."""
    state = {"hook": False}
    model = Net()
    ddp = _make_ddp(model)
    error = dist.DistBackendError("NCCL error in: ProcessGroupNCCL.cpp, unhandled cuda error, "
                                  "NCCL version 2.21.5: Cuda failure 'out of memory'")
    calls = {"n": 0}

    def hook(unused, bucket):
        if bucket.is_last():
            calls["n"] += 1
        state["hook"] = rank == 1 and calls["n"] == 2  # the last bucket of step 2: some launched before
        return _failing_hook(state, error)(unused, bucket)

    ddp.register_comm_hook(None, hook)
    loop = _loop(_device(), ddp, steps=4, batches=4, split=True)
    try:
        _run_loop(loop)
    finally:
        _OOM_EVENTS[rank] = loop.oom_events
    return {}


_OOM_EVENTS: dict[int, int] = {}


def case_probe_fails(rank: int) -> dict:
    """Rank 1's memory probe runs out of memory; every rank must skip the cell, and the group stays usable
    for what follows (DDP's construction, a step)."""
    from harness.train.trainloop import plan_memory

    def measure():
        if rank == 1:
            raise torch.OutOfMemoryError("injected OOM in the probe's batch of 8")
        return 1e9, 100.0, 1e10

    class Plans:
        memory_model = None

        def set_memory_model(self, *model):
            self.memory_model = model

        def empty_cache(self):
            pass

    failed = plan_memory(Plans(), measure)
    if failed is None:  # what Trainer does next: DDP's construction (collectives), then the loop
        ddp = _make_ddp(Net())
        _run_loop(_loop(_device(), ddp, steps=2, batches=2, split=True))
    t = torch.ones(1)
    dist.all_reduce(t)  # the cell's next collective (rank 0's gather, in a run)
    return {"failed": failed, "sum": t.item()}


def case_graph_freed(rank: int) -> dict:
    """One rank: the forward fails (not an OOM) at step 2; when the rank then empties the cache and takes
    its shadow step, the failed forward's activation must already be freed."""
    model = Net(fail_forward_at=2)
    device = _device()
    seen = {}

    def empty_cache() -> None:
        seen["alive_at_shadow"] = model.activations[-1]() is not None

    device.empty_cache = empty_cache
    loop = _loop(device, _make_ddp(model), steps=4, batches=4, split=False)
    _run_loop(loop)
    return {"error": loop.error, **seen}


def case_end_after_error(rank: int) -> dict:
    """Rank 1 leaves after an error with a collective in flight that its peer never joins (the peer is busy
    elsewhere): its last call (harness.run.launch's end_group) must not wait for it."""
    from harness.train.agreement import end_group

    if rank == 0:
        time.sleep(GROUP_TIMEOUT_S / 2)
        return {}
    dist.all_reduce(torch.ones(3), async_op=True)
    started = time.monotonic()
    end_group(failed=True)
    return {"end_s": time.monotonic() - started}


def case_phase_barrier(rank: int) -> dict:
    """Rank 1 fails while it builds the phase's pipeline (after DDP's construction): rank 0 must learn it at
    the phase's barrier on the host group, before the loop's first collective on the training group (which,
    under NCCL, would wait for its watchdog)."""
    import traceback

    from harness.checks.selftest.fidelity import SYNTHETIC_CELL, _calibrated, _pipeline_for, _scenario
    from harness.device.devices import EmulatedDevice
    from harness.train.trainloop import RankContext, run_cell

    accelerator = _calibrated(0.01)
    build = _pipeline_for(0.0, 1)

    def pipeline(ctx, cell):
        if rank == 1:
            raise RuntimeError("injected failure while building the pipeline")
        return build(ctx, cell)

    host = dist.new_group(backend="gloo", timeout=timedelta(seconds=GROUP_TIMEOUT_S))
    ctx = RankContext.alone(rank, 2, _scenario(accelerator, "features", 4, 1, 1, 4, world=2),
                            EmulatedDevice(accelerator, "features"), build_pipeline=pipeline, host_group=host)
    try:
        run_cell(ctx, SYNTHETIC_CELL)
    except Exception as err:  # noqa: BLE001 - where it was raised is what the test reads
        return {"frames": [f.name for f in traceback.extract_tb(err.__traceback__)], "text": str(err)[:300]}
    return {"frames": []}


CASES = {f.__name__: f for f in (case_tiny_shadow, case_shadow_fails, case_finish_reduction_fails,
                                 case_backend_error, case_probe_fails, case_graph_freed, case_end_after_error,
                                 case_phase_barrier)}


def _rank(rank: int, world: int, port: int, case: str, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=GROUP_TIMEOUT_S))
    result = {}
    try:
        result = CASES[case](rank)
    except Exception as err:  # noqa: BLE001 - what the test reads: the error, its type, the group's state
        result = {"raised": f"{type(err).__name__}: {err}", "type": type(err).__name__}
    result.update(rank=rank, ended=time.time(), group_alive=dist.is_initialized(),
                  oom_events_at_error=_OOM_EVENTS.get(rank))
    Path(out, f"rank{rank}.json").write_text(json.dumps(result))
    os._exit(0)  # as a spawned rank leaves (harness.run.launch): its connections close now


def run_case(case: str, world: int = 2, limit_s: float = 120) -> list[dict | None]:
    from harness.run.launch import free_port

    with tempfile.TemporaryDirectory() as out:
        ctx = mp.start_processes(_rank, args=(world, free_port(), case, out), nprocs=world, join=False,
                                 start_method="spawn")
        deadline = time.monotonic() + limit_s
        while not ctx.join(timeout=0.2):
            if time.monotonic() > deadline:
                for p in ctx.processes:
                    p.kill()
                break
        files = [Path(out, f"rank{r}.json") for r in range(world)]
        return [json.loads(f.read_text()) if f.exists() else None for f in files]


def _peer_ends_soon(failing: dict, peer: dict) -> None:
    assert peer is not None and "raised" in peer, peer  # the peer failed too, instead of waiting
    assert peer["ended"] - failing["ended"] < PEER_END_S, (peer["ended"] - failing["ended"], peer)


def test_shadow_steps_after_an_oom_run_on_a_tiny_batch():
    r0, r1 = run_case("case_tiny_shadow")
    assert r0 is not None and r1 is not None, (r0, r1)
    assert "raised" not in r1, r1["raised"]
    assert r0["steps"] == r1["steps"] == 4 and r1["shadow"] == 2 and r0["shadow"] == 0
    assert r1["error"] is None and r0["error"] is None
    assert r0["digest"] == r1["digest"]


def test_a_failed_shadow_step_aborts_the_group_and_the_peer_ends():
    r0, r1 = run_case("case_shadow_fails")
    assert r1["type"] == "GroupAborted", r1
    assert "the shadow step failed: RuntimeError: injected failure in the shadow step" in r1["raised"]
    _peer_ends_soon(r1, r0)


def test_a_failed_finish_reduction_aborts_the_group_and_the_peer_ends():
    r0, r1 = run_case("case_finish_reduction_fails")
    assert r1["type"] == "GroupAborted", r1
    assert "finish_reduction failed" in r1["raised"] and "injected failure in the reduction" in r1["raised"]
    _peer_ends_soon(r1, r0)


def test_a_distributed_backend_error_is_no_oom_and_aborts_the_group():
    r0, r1 = run_case("case_backend_error")
    assert r1["type"] == "GroupAborted", r1
    assert "a distributed-backend error in the backward: DistBackendError" in r1["raised"]
    assert r1["oom_events_at_error"] == 0  # not split, not counted as an OOM
    _peer_ends_soon(r1, r0)


def test_the_memory_probe_failure_is_agreed():
    r0, r1 = run_case("case_probe_fails", limit_s=GROUP_TIMEOUT_S + 60)
    assert r0 is not None and r1 is not None and "raised" not in r0 and "raised" not in r1, (r0, r1)
    assert r1["failed"].startswith("OOM in the memory probe: OutOfMemoryError: injected")
    assert r0["failed"].startswith("stopped with another rank, whose memory probe failed")
    assert r0["sum"] == r1["sum"] == 2.0  # the group went on in step


def test_the_failed_steps_graph_is_freed_before_the_shadow_step():
    (r0,) = run_case("case_graph_freed", world=1)
    assert r0["error"] == "error in the forward: RuntimeError: injected failure in the forward", r0
    assert r0["alive_at_shadow"] is False


def test_backend_errors_are_never_ooms():
    from harness.train.ddpstep import is_backend_error, is_oom

    nccl = dist.DistBackendError("NCCL error: unhandled cuda error, NCCL version 2.21.5: Cuda failure "
                                 "'out of memory'")
    assert not is_oom(nccl) and is_backend_error(nccl)
    gloo = RuntimeError("[pair.cc:553] Connection closed by peer [127.0.0.1]:1234")
    assert not is_oom(gloo) and is_backend_error(gloo)
    assert is_oom(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert is_oom(RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling cublasCreate"))


def test_a_rank_ending_after_an_error_does_not_wait_for_its_collectives():
    """Destroying the group would wait for the unmatched allreduce up to the group's timeout (60 s here)."""
    _, r1 = run_case("case_end_after_error")
    assert r1 is not None and "raised" not in r1, r1
    assert r1["end_s"] < PEER_END_S, r1


def test_a_rank_lost_while_building_a_phase_is_noticed_at_the_host_barrier():
    r0, r1 = run_case("case_phase_barrier")
    assert "injected failure while building the pipeline" in r1["text"], r1
    assert "host_barrier" in r0["frames"] and "_one_step" not in r0["frames"], r0
