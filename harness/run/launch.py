"""Start the rank processes once per scenario and run every cell on every rank.

One node: ``world_size`` processes are spawned (torch.multiprocessing, start method spawn) on a
fresh free port. Under torchrun the processes already exist and call :func:`rank_main` directly.
gloo on CPU, NCCL on CUDA. What each rank does with the cells once it has joined is in
harness.run.rankloop.
"""
from __future__ import annotations

import os
import socket
import sys
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from harness.config.launchconfig import LaunchConfig
from harness.config.request import Torchrun
from harness.device.devices import CudaDevice, EmulatedDevice
from harness.errors import UsageError
from harness.run import rankloop, supervisor
from harness.train.agreement import end_group
from harness.train.trainloop import RankContext

PG_TIMEOUT = timedelta(seconds=300)
# Host work the ranks wait for (writing the datasets, dropping or warming the page cache, the machine probe)
# can take many minutes at full scale: those waits use a gloo side group with this timeout, never NCCL's.
HOST_WORK_TIMEOUT = timedelta(hours=2)


def resolve_device(mode: str, world_size: int, torchrun: Torchrun | None = None, share_gpu: bool = False) -> str:
    """auto: real CUDA if there are enough GPUs for every rank, else the emulated accelerator.
    Under torchrun (RANK and WORLD_SIZE set) the question is per node: enough GPUs for the node's
    ranks, or one bound to each task (Slurm --gpus-per-task=1); visible GPUs that cannot serve the
    ranks are an error, never a silent fallback to the emulator. `world_size`: the ranks on this
    node; `torchrun`: this process's identity under torchrun (harness.config.request), None when
    spawned; `share_gpu` (--share-gpu): the ranks share the visible GPUs over gloo, so one GPU
    serves any number of them."""
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return choose_device(mode, world_size, gpus, torchrun.local_world_size if torchrun else None, share_gpu)


def choose_device(mode: str, world_size: int, gpus: int, torchrun_local_ranks: int | None = None,
                  share_gpu: bool = False) -> str:
    """resolve_device's decision from the number of visible GPUs (`gpus`)."""
    if mode == "emulated":
        return "emulated"
    if share_gpu:
        if gpus:
            return "cuda"
        if mode == "cuda":
            raise UsageError("--share-gpu with --device cuda, but no GPU is visible; drop --device cuda to "
                             "emulate, or run where a GPU is")
        print(f"note: --share-gpu: no GPU is visible, so the {world_size} ranks are emulated (over gloo, as ranks "
              "sharing a GPU would be)", file=sys.stderr)
        return "emulated"
    if torchrun_local_ranks is not None:
        return _torchrun_device(mode, gpus, torchrun_local_ranks)
    if mode == "cuda":
        if gpus < world_size:
            raise UsageError(f"--device cuda needs {world_size} GPUs for {world_size} ranks but {gpus} "
                             f"are visible; lower --world-size, pass --share-gpu to run the ranks over gloo on "
                             f"the visible GPUs, or use --device emulated")
        return "cuda"
    return "cuda" if gpus >= world_size else "emulated"


def training_backend(device: str, share_gpu: bool = False) -> str:
    """The training group's backend: NCCL on CUDA, gloo on CPU and for ranks sharing a GPU (NCCL
    refuses two ranks on one GPU)."""
    return "nccl" if device == "cuda" and not share_gpu else "gloo"


def _torchrun_device(mode: str, gpus: int, local_ranks: int) -> str:
    if gpus == 0:
        if mode == "cuda":
            raise UsageError("--device cuda under torchrun, but this process sees no GPU (CUDA_VISIBLE_DEVICES="
                             f"{os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}); bind GPUs to the tasks or use "
                             "--device emulated")
        return "emulated"
    if gpus == 1 or gpus >= local_ranks:  # one GPU bound per task, or the node's GPUs shared by its ranks
        return "cuda"
    raise UsageError(f"torchrun started {local_ranks} ranks on this node but each sees {gpus} GPUs: give every "
                     f"rank a GPU (--nproc-per-node at most {gpus}, or one GPU per task), or pass --device "
                     f"emulated to emulate instead")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def threads_per_rank(world_size: int) -> int:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, cores // world_size)


def dataset_gb(data_paths: dict[str, Path]) -> float:
    """Size on disk of the largest materialisation the run used."""
    from harness.data.materialise import load_manifest

    return max((load_manifest(p)["total_bytes"] for p in data_paths.values()), default=0) / 1e9


def spawn(config: LaunchConfig, log=None) -> tuple[dict[str, Path], list[str]]:
    """Run the cells in world_size spawned processes on this node, watched by
    harness.run.supervisor: a cell whose rank dies or hangs is recorded as failed and fresh ranks
    go on. Returns the data paths and the failures (one line per failed cell)."""
    data_paths = config.materialise_all(progress=config.progress)  # before the ranks start
    os.environ["MASTER_ADDR"] = "127.0.0.1"

    def fresh_port() -> None:  # every group of ranks rendezvouses anew
        os.environ["MASTER_PORT"] = str(free_port())

    failures = supervisor.supervise(config, data_paths, _spawned, prepare=fresh_port,
                                    log=log or (lambda line: print(line, file=sys.stderr, flush=True)))
    return data_paths, failures


def _spawned(local_rank: int, world: int, config: LaunchConfig, data_paths: dict[str, Path]) -> None:
    supervisor.detach_rank()
    code = 0
    try:
        rank_main(local_rank, local_rank, world, config, data_paths)
    except BaseException as err:  # the launcher reads the cause from this file and records it
        supervisor.write_rank_error(config.run_dir, local_rank, err)
        code = 1
    # Everything is written (cells.jsonl is fsynced per cell). Leave without running C++ static
    # destructors: torch's background threads sometimes abort there ("terminate called without an
    # active exception"), which would turn a finished run into a crashed rank.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def rank_main(rank: int, local_rank: int, world: int, config: LaunchConfig,
              data_paths: dict[str, Path] | None = None) -> dict[str, Path]:
    """One rank: join the process group, then run every cell. Under torchrun (data_paths None) the
    first process of each node materialises the data while the others wait at a barrier."""
    from strategies import registry

    settings = config.request  # the run's frozen settings, as the command line gave them
    for module in settings.plugins:
        registry.load_plugin(module)

    # DataLoader workers start from a forkserver (forking a rank that already runs gloo threads aborts at
    # worker exit); preloading makes each worker a cheap fork of a process that has imported the items, and
    # the first preload makes the forkserver and its workers die with the rank (harness.run.forkserverinit).
    mp.set_forkserver_preload(["harness.run.forkserverinit", "torch", "harness.train.torchdataset",
                               "strategies.registry", *settings.plugins])
    cuda = config.device == "cuda"
    # An emulated rank's stand-in model is tiny: one thread, so that idle OpenMP threads do not spin on the
    # cores the DataLoader workers need (a GPU host launches kernels from one thread too).
    torch.set_num_threads(threads_per_rank(min(world, int(os.environ.get("LOCAL_WORLD_SIZE", world))))
                          if cuda else 1)
    share = settings.share_gpu  # --share-gpu
    if cuda:
        device = CudaDevice(local_rank, int(os.environ.get("LOCAL_WORLD_SIZE", world)), share)
    else:
        device = EmulatedDevice(config.scenario.accelerator, config.scenario.training.workload)
    join_group(training_backend(config.device, share), rank, world, device)
    host_group = dist.new_group(backend="gloo", timeout=HOST_WORK_TIMEOUT)
    failed = True
    try:
        if data_paths is None:
            data_paths = _join_torchrun_run(config, local_rank, host_group)
        rankloop.run_all(RankContext(rank, world, device, data_paths, config, local_rank=local_rank,
                                     host_group=host_group))
        failed = False
    except KeyboardInterrupt:  # the launcher stopping every rank (Ctrl-C, SIGTERM): no peer is left behind, and
        failed = False  # destroying the group as a clean end lets the rank's queues unlink their semaphores
        raise
    except BaseException as err:
        if config.supervised:  # before the process group goes down and the peers fail in turn
            supervisor.write_rank_error(config.run_dir, rank, err)
        raise
    finally:
        end_group(failed)  # after an error aborted, not destroyed: destroying waits on in-flight collectives
    return data_paths


def join_group(backend: str, rank: int, world: int, device) -> None:
    """The training process group. Under NCCL the ranks first compare their GPUs' UUIDs through the
    rendezvous store: two ranks on one GPU are one line and exit 2 here, where NCCL's init would
    fail with its duplicate-GPU traceback."""
    if backend != "nccl":
        join_with_gpus(backend, rank, world)
        return
    index = device.torch_device.index
    gpu = (str(torch.cuda.get_device_properties(index).uuid),
           f"{torch.cuda.get_device_name(index)} on {socket.gethostname()}")
    join_with_gpus(backend, rank, world, gpu, device_id=device.torch_device)


def join_with_gpus(backend: str, rank: int, world: int, gpu: tuple[str, str] | None = None,
                   **options) -> None:
    """init_process_group from the environment (MASTER_ADDR, MASTER_PORT; torchrun's agent store),
    with `gpu` = (UUID, label) first checked against every other rank's (check_distinct_gpus) on
    the rendezvous store, before the group (and NCCL's communicator) is made."""
    if gpu is None:
        dist.init_process_group(backend, rank=rank, world_size=world, timeout=PG_TIMEOUT, **options)
        return
    store, rank, world = next(dist.rendezvous("env://", rank=rank, world_size=world, timeout=PG_TIMEOUT))
    store.set_timeout(PG_TIMEOUT)
    check_distinct_gpus(dist.PrefixStore("dlbench_gpus", store), rank, world, *gpu)
    dist.init_process_group(backend, store=dist.PrefixStore("default_pg", store), rank=rank, world_size=world,
                            timeout=PG_TIMEOUT, **options)  # prefixed as init_process_group prefixes its own


def check_distinct_gpus(store, rank: int, world: int, uuid: str, label: str) -> None:
    """Every rank posts its GPU's UUID and reads all the others' (`store`: the rendezvous store); a
    GPU that two ranks would drive is a UsageError naming them, on every rank. Rank 0 (the store's
    host when spawned) goes on only once every other rank is done with the store, so none of them
    loses it mid-read."""
    store.set(f"gpu/{rank}", f"{uuid}\t{label}")
    store.wait([f"gpu/{r}" for r in range(world)])
    owner: dict[str, int] = {}
    error = None
    for r in range(world):
        gpu, where = store.get(f"gpu/{r}").decode().split("\t", 1)
        if gpu in owner and error is None:
            error = (f"ranks {owner[gpu]} and {r} would drive the same GPU ({where}, {gpu}): NCCL needs a GPU "
                     f"per rank; start at most as many ranks per node as it has GPUs, or pass --share-gpu to run "
                     f"the ranks over gloo on the GPUs there are")
        owner.setdefault(gpu, r)
    if rank == 0:
        store.wait([f"read/{r}" for r in range(1, world)])
    else:
        store.set(f"read/{rank}", "1")
    if error is not None:
        raise UsageError(error)


def _join_torchrun_run(config: LaunchConfig, local_rank: int, host_group) -> dict[str, Path]:
    """Under torchrun only rank 0 created the run directory: share its path; the first process of
    each node materialises the data, the others then find and reuse it."""
    shared = [config.run_dir, config.plan]  # rank 0 read cells.jsonl: what is left to run (--resume)
    dist.broadcast_object_list(shared, src=0)
    config.run_dir, config.plan = shared
    data_paths = config.materialise_all(progress=config.progress) if local_rank == 0 else None
    dist.barrier(group=host_group)  # minutes at full scale: the side group's timeout, not NCCL's
    if local_rank != 0:
        data_paths = config.materialise_all(progress=False, regenerate=False)
    return data_paths
