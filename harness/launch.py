"""Start the rank processes once per scenario and run every cell on every rank.

One node: ``world_size`` processes are spawned (torch.multiprocessing, start method spawn) on a fresh free
port. Under torchrun the processes already exist and call :func:`rank_main` directly. gloo on CPU, NCCL on
CUDA. After each cell the ranks gather their records to rank 0, which appends the cell to cells.jsonl at once.
"""
from __future__ import annotations

import os
import socket
import sys
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from harness import probe, records, results
from harness.device import CudaDevice, EmulatedDevice
from harness.errors import UsageError
from harness.matrix import Cell
from harness.profiling import CellProfiler
from harness.scenario import Scenario
from harness.trainloop import RankContext, run_cell

PG_TIMEOUT = timedelta(seconds=300)


@dataclass
class LaunchConfig:
    scenario: Scenario
    cells: list[Cell]
    run_dir: Path
    data_dir: Path
    device: str  # "cuda" or "emulated"
    plugins: list[str] = field(default_factory=list)
    progress: bool = True
    cache_state: str = "as-is"
    decompose: bool = False
    profile: bool = False
    repeats: int = 1

    def materialise_all(self, progress: bool) -> dict[str, Path]:
        """Every storage of the matrix materialised (reused when it already exists)."""
        from harness.materialise import materialise

        storages = sorted({c.choice("storage").name for c in self.cells})
        return {s: materialise(self.scenario.dataset, s, self.data_dir, progress=progress) for s in storages}


def resolve_device(mode: str, world_size: int) -> str:
    """auto: real CUDA if there are enough GPUs for every rank, else the emulated accelerator."""
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if mode == "emulated":
        return "emulated"
    if mode == "cuda":
        if gpus < world_size:
            raise UsageError(f"--device cuda needs {world_size} GPUs for {world_size} ranks but {gpus} "
                             f"are visible; lower --world-size or use --device emulated")
        return "cuda"
    return "cuda" if gpus >= world_size else "emulated"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def threads_per_rank(world_size: int) -> int:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, cores // world_size)


def dataset_gb(data_paths: dict[str, Path]) -> float:
    """Size on disk of the largest materialisation the run used."""
    from harness.materialise import load_manifest

    return max((load_manifest(p)["total_bytes"] for p in data_paths.values()), default=0) / 1e9


def spawn(config: LaunchConfig) -> dict[str, Path]:
    """Run all cells in world_size spawned processes on this node; raises if a rank crashed."""
    data_paths = config.materialise_all(progress=config.progress)  # before the ranks start
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(free_port())
    world = config.scenario.world_size
    mp.start_processes(_spawned, args=(world, config, data_paths), nprocs=world, start_method="spawn",
                       join=True)
    return data_paths


def _spawned(local_rank: int, world: int, config: LaunchConfig, data_paths: dict[str, Path]) -> None:
    rank_main(local_rank, local_rank, world, config, data_paths)
    # Everything is written (cells.jsonl is fsynced per cell). Leave without running C++ static
    # destructors: torch's background threads sometimes abort there ("terminate called without an
    # active exception"), which would turn a finished run into a crashed rank.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def rank_main(rank: int, local_rank: int, world: int, config: LaunchConfig,
              data_paths: dict[str, Path] | None = None) -> dict[str, Path]:
    """One rank: join the process group, then run every cell. Under torchrun (data_paths None) the first
    process of each node materialises the data while the others wait at a barrier."""
    from strategies import registry

    for module in config.plugins:
        registry.load_plugin(module)

    # DataLoader workers start from a forkserver (forking a rank that already runs gloo threads aborts at
    # worker exit); preloading makes each worker a cheap fork of a process that has imported the pipeline.
    mp.set_forkserver_preload(["torch", "harness.items", "strategies.registry", *config.plugins])
    torch.set_num_threads(threads_per_rank(min(world, int(os.environ.get("LOCAL_WORLD_SIZE", world)))))
    cuda = config.device == "cuda"
    if cuda:
        device = CudaDevice(local_rank)
    else:
        device = EmulatedDevice(config.scenario.accelerator, config.scenario.training.workload)
    dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=world, timeout=PG_TIMEOUT,
                            **({"device_id": device.torch_device} if cuda else {}))
    try:
        if data_paths is None:  # under torchrun only rank 0 created the run directory: share its path
            shared = [config.run_dir]
            dist.broadcast_object_list(shared, src=0)
            config.run_dir = shared[0]
            if local_rank == 0:
                data_paths = config.materialise_all(progress=config.progress)
            dist.barrier()
            if local_rank != 0:
                data_paths = config.materialise_all(progress=False)  # finds them, reuses them
        # repeats interleave across cells (A B C A B C) so that machine drift spreads evenly
        plan = [(repeat, cell) for repeat in range(config.repeats) for cell in config.cells]
        for i, (repeat, cell) in enumerate(plan):
            show = config.progress and rank == 0
            if cell is config.cells[0]:
                if rank == 0:  # the machine probe, once per repeat, while the other ranks wait
                    results.append_line(config.run_dir / "probe.jsonl", probe.measure(config.scenario, repeat))
                dist.barrier()
            if show:
                print(f"[{i + 1}/{len(plan)}] {cell.id} ...", file=sys.stderr, flush=True)
            started = time.perf_counter()
            ctx = RankContext(rank, world, config.scenario, device, data_paths,
                              progress=_progress_line if show and sys.stderr.isatty() else None,
                              local_rank=local_rank, cache_state=config.cache_state,
                              decompose=config.decompose)
            profiler = (CellProfiler(config.run_dir / "traces" / cell.id.replace("/", "_"), rank,
                                     skip_first=config.scenario.training.warmup_steps)
                        if config.profile and repeat == 0 else None)
            record = run_cell(ctx, cell, profiler=profiler)
            gathered = [None] * world if rank == 0 else None
            dist.gather_object(record, gathered, dst=0)
            if rank == 0:
                line = records.cell_line(config.scenario, cell, device.name, config.device != "cuda",
                                         gathered, time.perf_counter() - started)
                line["repeat"] = repeat
                results.append_cell(config.run_dir, line)
                if show:
                    print("\r" + records.summary_text(line), file=sys.stderr, flush=True)
    finally:
        dist.destroy_process_group()
    return data_paths


def _progress_line(step: int, total: int) -> None:
    print(f"\r    step {step}/{total}", end="", file=sys.stderr, flush=True)
