"""An OOM on one rank of a 2-rank DDP run must neither hang nor crash the other: python -m harness.commands.oomcheck.

Rank 1's model raises torch.OutOfMemoryError in its forward pass at one step: injected (the exception
raised, on CPU) or real (`--real`: a CUDA allocation larger than the free memory, both ranks on GPU 0 over
gloo). With splitting on (dynamic batching's safety net) every rank must take the same number of steps and
rank 1 must count one OOM event; with splitting off every rank must stop at the same step with an OOM error.
The ranks run the harness's own MeasuredLoop on batches held in memory (features workload)."""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

WARMUP, WINDOW, BATCH = 1, 6, 8


class InjectOOM(nn.Module):
    """Wraps a model; on `rank` its `at_call`-th forward runs out of memory (raised, or a real allocation)."""

    def __init__(self, inner: nn.Module, rank: int, at_call: int, real: bool):
        super().__init__()
        self.inner, self.rank, self.at_call, self.real, self.calls = inner, rank, at_call, real, 0

    def forward(self, batch: dict) -> torch.Tensor:
        self.calls += 1
        if self.rank == 1 and self.calls == self.at_call:
            if not self.real:
                raise torch.OutOfMemoryError("injected OOM on rank 1")
            free, _ = torch.cuda.mem_get_info()
            torch.empty(2 * free + (1 << 30), dtype=torch.uint8, device="cuda")  # raises: a real OOM
        return self.inner(batch)


class SplitPolicy:
    def __init__(self, split: bool):
        self.splits_on_oom = split

    def observe(self, memory_fraction: float) -> None:
        pass


def _batches(where: torch.device, n: int = 4) -> list[dict]:
    g = torch.Generator().manual_seed(0)
    return [{"index": torch.arange(i * BATCH, (i + 1) * BATCH), "nbytes": 0, "cache_stats": None,
             "padded_pixels": 0, "real_pixels": 0, "image_emb": torch.randn(BATCH, 2048, generator=g),
             "text_emb": torch.randn(BATCH, 768, generator=g)} for i in range(n)]


def _rank(rank: int, world: int, port: int, split: bool, real: bool, at_call: int, out: str) -> None:
    from harness.config.accelerators import get_accelerator
    from harness.device.devices import CudaDevice, EmulatedDevice
    from harness.device.standin import TwoTower
    from harness.measure.telemetry import MemorySampler, NvmlSampler
    from harness.train.agreement import param_digest
    from harness.train.batches import InMemoryBatches
    from harness.train.trainloop import MeasuredLoop

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    device = CudaDevice(0) if real else EmulatedDevice(get_accelerator("V100-16GB"), "features")
    torch.manual_seed(0)
    model = InjectOOM(TwoTower("features"), rank, at_call, real).to(device.torch_device)
    ddp = DDP(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    loop = MeasuredLoop(device, ddp, opt, InMemoryBatches(_batches(device.torch_device)), SplitPolicy(split),
                        WARMUP, WINDOW)
    with MemorySampler() as memory, NvmlSampler(None) as nvml:
        loop.run(memory, nvml)
    result = {"rank": rank, "steps": loop.step, "oom_events": loop.oom_events, "error": loop.error,
              "digest": param_digest(model)}
    Path(out, f"rank{rank}.json").write_text(json.dumps(result))
    dist.destroy_process_group()


def run(split: bool, real: bool = False, at_call: int = 3, timeout_s: float = 120.0) -> list[dict]:
    """Both ranks' results; RuntimeError when a rank crashed or the run did not end within timeout_s."""
    from harness.run.launch import free_port

    with tempfile.TemporaryDirectory() as out:
        ctx = mp.start_processes(_rank, args=(2, free_port(), split, real, at_call, out), nprocs=2,
                                 join=False, start_method="spawn")
        deadline = time.monotonic() + timeout_s
        while not ctx.join(timeout=1.0):
            if time.monotonic() > deadline:
                for p in ctx.processes:
                    p.kill()
                raise RuntimeError(f"the ranks did not finish within {timeout_s:.0f} s (a hang)")
        return [json.loads(Path(out, f"rank{r}.json").read_text()) for r in range(2)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--real", action="store_true", help="a real CUDA OOM (needs a GPU)")
    args = p.parse_args(argv)
    ok = True
    for split in (True, False):
        ranks = run(split, real=args.real)
        steps = {r["steps"] for r in ranks}
        good = len(steps) == 1 and (ranks[1]["oom_events"] == 1 and not any(r["error"] for r in ranks)
                                    if split else all((r["error"] or "").startswith("OOM") for r in ranks))
        ok &= good
        print(f"split={'on' if split else 'off'}: steps {[r['steps'] for r in ranks]}, OOM events "
              f"{[r['oom_events'] for r in ranks]}, errors {[r['error'] for r in ranks]}: "
              f"{'OK' if good else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
