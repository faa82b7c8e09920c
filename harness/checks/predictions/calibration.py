"""What the prediction checks share (command.py and capacity_command.py beside it): the scenario as
one launch of a check (`variant`), the storages they materialise, one launch of a group of cases as
real cells in spawned ranks (`launch_group`, each case's `Visit` read back from its directory), and
the side measurements beside the cells (`side_bench`, from sidebench.py beside it), kept in
bench.json and read back as the pure Bench (`bench_of`)."""
from __future__ import annotations

import dataclasses
import json
import os
import random
import time
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from harness.analysis.checkcases import Bench, CheckCase
from harness.checks.predictions import sidebench
from harness.config.choices import StrategyChoice
from harness.config.launchconfig import LaunchConfig
from harness.config.matrix import Cell, expand
from harness.config.request import BenchRequest
from harness.config.scenario import Scenario
from harness.data import pagecache
from harness.data.decoders import decode_resize, resized_shapes
from harness.data.fields import FIELDS_FOR
from harness.data.generator import image_sides
from harness.errors import UsageError
from harness.results import rundir
from harness.results.cellresult import CellResult
from harness.run import launch
from strategies import registry

STORAGES = ("raw", "mmap", "hdf5")
PACKED = ("mmap", "hdf5")  # storages whose samples lie in a few large files: a cold sample's requests measured
COLD_READ_SAMPLES = 2048  # about what a launch's window reads (60 steps of 32)


@dataclass(frozen=True)
class Visit:
    """One measured visit of a case: its cell line, and the host's other runnable tasks during its
    launch (sidebench.OutsideRunnable)."""

    line: CellResult
    outside: float


def variant(sc: Scenario, case: CheckCase, storages: Sequence[str], steps: int) -> Scenario:
    """The scenario as one launch of the check runs it: the case's settings, default strategies
    elsewhere."""
    tr = dataclasses.replace(sc.training, workers=case.workers, batch_size=case.batch_size,
                             image_size=case.image_size, decoder=case.decoder, steps=steps, epochs=0,
                             warmup_steps=max(3, sc.training.warmup_steps))
    matrix = {axis: [StrategyChoice(axis, name)] for axis, name in registry.DEFAULTS.items()}
    matrix["storage"] = [StrategyChoice("storage", s) for s in storages]
    return dataclasses.replace(sc, world_size=case.world_size, training=tr, matrix=matrix)


def materialise_storages(sc: Scenario, case: CheckCase, storages: Sequence[str], run_dir: Path, data_dir: Path,
                         steps: int, progress: bool) -> dict[str, Path]:
    """The dataset in each storage (reused when it exists): storage label -> its directory."""
    v = variant(sc, case, storages, steps)
    request = BenchRequest.bare(v.name, data_dir=data_dir)
    return LaunchConfig(request, v, expand(v), run_dir, "emulated").materialise_all(progress=progress)


def launch_group(sc: Scenario, group: list[CheckCase], run_dir: Path, data_dir: Path, steps: int,
                 plugins: Sequence[str] = ()) -> dict[str, Visit]:
    """One launch: the group's cases (they differ only in storage) as cells; case name -> its
    visit."""
    v = variant(sc, group[0], [c.storage for c in group], steps)
    cells: list[Cell] = expand(v)
    request = BenchRequest.bare(v.name, data_dir=data_dir, plugins=tuple(plugins), quiet=True,
                                cache_state=group[0].cache_state, order="fixed")
    config = LaunchConfig(request, v, cells, run_dir, "emulated", started_at=time.time())
    run_dir.mkdir(parents=True, exist_ok=True)
    with confined(group[0].cpus), sidebench.OutsideRunnable() as outside:
        _, failures = launch.spawn(config, log=lambda line: None)
    if failures:
        raise UsageError(f"--check-predictions: a cell failed in {run_dir}: {failures[0]}")
    rundir.write_json(run_dir / "visit.json", {"cases": [c.name for c in group], "outside_runnable": outside.mean})
    return read_visits(run_dir, group)


@contextmanager
def confined(cpus: int):
    """The launch's processes (they inherit this process's affinity) on the first `cpus` of the
    CPUs this process may use (0: all of them); the affinity restored afterwards."""
    allowed = sorted(os.sched_getaffinity(0))
    if not cpus or cpus >= len(allowed):
        yield
        return
    os.sched_setaffinity(0, set(allowed[:cpus]))
    try:
        yield
    finally:
        os.sched_setaffinity(0, set(allowed))


def read_visits(run_dir: Path, group: list[CheckCase]) -> dict[str, Visit]:
    """A launch's visits read back from its directory (cells.jsonl, visit.json)."""
    by_storage = {r.name("storage"): r for r in rundir.read_results(run_dir)}
    info = run_dir / "visit.json"
    outside = (json.loads(info.read_text()).get("outside_runnable") if info.exists() else None) or 0.0
    return {c.name: Visit(by_storage[c.storage], outside) for c in group if c.storage in by_storage}


def samples_of(sc: Scenario) -> int:
    return int(getattr(sc.dataset, "samples", 0) or 0)


def side_bench(sc: Scenario, base: CheckCase, all_cases: list[CheckCase], data_paths: dict, cores: int) -> dict:
    """The side measurements (sidebench.py) on the scenario's own data, as bench.json holds them
    (bench_of reads them back as the pure Bench): each storage's read cost, the decode cost per
    image size and decoder, the resized pixels per image, the disk (one large file, then the raw
    storage's small files) and the contention factor."""
    storage = {s: StrategyChoice("storage", s).create() for s in STORAGES}
    indices = list(range(0, min(samples_of(sc), 2048), 4))[:256]
    read_s = {s: _read_cost(storage[s], data_paths[s], sc.training.workload, indices, base.batch_size)
              for s in STORAGES}
    reader = storage["raw"].open(data_paths["raw"], fields=FIELDS_FOR["pixels"])
    jpegs = [s.jpeg for s in reader.read_batch(indices[:96])]
    pairs = {(c.image_size, c.decoder) for c in all_cases}
    decode_s = sidebench.decode_costs({p: partial(decode_resize, image_size=p[0], decoder=p[1])
                                       for p in sorted(pairs)}, jpegs)
    sides = image_sides(sc.dataset)
    area = {size: float((resized_shapes(sides, size).prod(axis=1)).mean())
            for size in sorted({c.image_size for c in all_cases})}
    disk = sidebench.disk(storage["hdf5"].files(data_paths["hdf5"]), pagecache.drop)  # one large file
    disk["small_files"] = sidebench.cold_files(storage["raw"].files(data_paths["raw"]), pagecache.drop)
    order = list(range(samples_of(sc)))
    random.Random(0).shuffle(order)  # a shuffled sampler's order, over what a launch's window reads
    disk["cold_reads"] = {s: sidebench.cold_read(partial(storage[s].open, data_paths[s],
                                                         fields=FIELDS_FOR[sc.training.workload]),
                                                 storage[s].files(data_paths[s]), pagecache.drop,
                                                 order[:COLD_READ_SAMPLES], base.batch_size)
                          for s in PACKED}
    contention = sidebench.contention(partial(decode_resize, image_size=base.image_size, decoder="pil"),
                                      jpegs[:32], cores)
    return {"read_s": read_s, "decode_s": {f"{k[0]}/{k[1]}": v for k, v in decode_s.items()},
            "area": area, "disk": disk, "contention": contention}


def _read_cost(storage, path: Path, workload: str, indices: list[int], batch: int) -> float:
    """Warm CPU seconds per sample of the storage's read_batch of the workload's fields."""
    reader = storage.open(path, fields=FIELDS_FOR[workload])
    cost = sidebench.read_cost(reader, indices, batch)
    close = getattr(reader, "close", None)
    if close is not None:
        close()
    return cost


def bench_of(obj: dict) -> Bench:
    """bench.json back as the pure Bench. With the small files' figures (the raw storage: one file,
    one request per sample), a request's latency is a cold file's extra wall time less its bytes at
    the sequential rate, and its extra CPU is per request; else the 4 KiB random reads' latency and
    the CPU per cold byte of the large file. A packed storage's cold sample (`cold_reads`) makes
    its extra wall time over that latency in requests (its transfer, microseconds, left in), and
    costs its extra CPU."""
    disk, small = obj["disk"], obj["disk"].get("small_files")
    latency_ms, per_request = disk["latency_ms"], 0.0
    if small and disk["read_mb_s"]:
        transfer = small["bytes_per_file"] / (disk["read_mb_s"] * 1e6)
        latency_ms = max(0.0, small["extra_wall_s_per_file"] - transfer) * 1e3
        per_request = small["extra_cpu_s_per_file"]
    reads = disk.get("cold_reads") or {}  # the packed storages' cold samples: requests = extra wall / latency
    cold_requests = {s: read["extra_wall_s_per_sample"] / (latency_ms / 1e3) for s, read in reads.items()
                     if latency_ms > 0}
    return Bench(read_s=obj["read_s"], decode_s={(int(k.split("/")[0]), k.split("/")[1]): v
                                                 for k, v in obj["decode_s"].items()},
                 cold_requests=cold_requests,
                 cold_cpu_s={s: read["extra_cpu_s_per_sample"] for s, read in reads.items()},
                 area={int(k): v for k, v in obj["area"].items()}, disk_mb_s=disk["read_mb_s"],
                 disk_latency_ms=latency_ms, cold_cpu_s_per_byte=disk["cold_cpu_s_per_byte"],
                 cold_cpu_s_per_request=per_request, contention=obj["contention"]["factor"])
