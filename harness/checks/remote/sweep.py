"""The measuring side of `check-remote` (its model: model.py beside it): each bandwidth setting in
its own remote session (harness.lab.session: the project's store in a network namespace behind a
veth pair shaped with tc; root), the cases read one after another through the s3 storage by this
one process, over a fresh small dataset; each round's unshaped calibration predicts its shaped
settings. This kernel may have no sch_netem: latency is then never shaped, and the latency setting
is the store's measured one."""
from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from harness.checks.remote import model
from harness.checks.remote.model import BATCH, CASES
from harness.data.fields import FIELDS_FOR
from harness.data.generator import DatasetSpec
from harness.data.materialise import materialise
from harness.lab.link import Shape
from harness.lab.session import RemoteSettings, session
from harness.measure import remotecounters
from harness.measure.hostload import HostLoad
from strategies import registry

FIELDS = FIELDS_FOR["pixels"]


def measure(path: Path, fmt: str, in_flight: int, seconds: float, seed: int) -> dict:
    """Random batches through the s3 storage's reader for about ``seconds`` (after two warm-up
    batches)."""
    storage = registry.create("storage", "s3", format=fmt, shard_size=64, in_flight=in_flight)
    reader = storage.open(path, fields=FIELDS)
    rng = np.random.default_rng(seed)
    n = len(reader)
    for _ in range(2):
        reader.read_batch(rng.choice(n, BATCH, replace=False).tolist())
    before = reader.remote_stats()
    load = HostLoad(root=os.getpid())  # this process and the store it started; its parent's tree is not the run's
    load.start()
    samples, t0, cpu0 = 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - t0 < seconds:
        samples += len(reader.read_batch(rng.choice(n, BATCH, replace=False).tolist()))
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    outside = load.stop()[0]
    after = reader.remote_stats()
    reader.close()
    return _figures(before, after, samples, wall, cpu, outside)


def _figures(before: dict, after: dict, samples: int, wall: float, cpu: float, outside: float | None) -> dict:
    requests = after["requests"] - before["requests"]
    wait = after["wait_s"] - before["wait_s"]
    bins = [a - b for a, b in zip(after["latency_bins"], before["latency_bins"])]
    return {"samples": samples, "rate": samples / wall, "wait_s_per_sample": wait / samples,
            "own_s_per_sample": (wall - wait) / samples, "requests_per_sample": requests / samples,
            "cpu_s_per_sample": cpu / samples, "idle_s_per_sample": max(0.0, wall - cpu) / samples,
            "idle_s_per_request": max(0.0, wall - cpu) / requests if requests else float("nan"),
            "bytes_per_sample": (after["bytes"] - before["bytes"]) / samples,
            "request_s": wait / requests if requests else float("nan"), "outside_pct": outside,
            "p50_ms": remotecounters.percentile_ms(bins, 50)}


def sweep(paths: dict, settings: list[float], seconds: float, spec: DatasetSpec, work: str,
          round_: int) -> list[dict]:
    """One round: each setting in its own session (link, server), the cases one after another; the
    round's unshaped calibration predicts its shaped settings."""
    rows, cal, latency, idle, capacity = [], {}, None, None, 0.0
    for setting in settings:
        shape = Shape(0.0, setting, 0.0)
        with session(RemoteSettings(shape=shape, bucket="dlbench", namespace=True),
                     measure_cost=not setting) as live:
            if live.cost is not None:  # the store's own probe, at the calibration: one process, CPU-bound
                capacity = 1000 / max(live.cost.server_cpu_ms_per_request, 1e-9)
            print(f"round {round_ + 1}, {shape.label()}: " + " | ".join(live.header()[1:]), file=sys.stderr)
            for fmt, _ in CASES:
                if fmt not in paths:
                    paths[fmt] = materialise(spec, "s3", Path(work), progress=False,
                                             params={"format": fmt, "shard_size": 64})
            for k, (fmt, depth) in enumerate(CASES):
                got = measure(paths[fmt], fmt, depth, seconds, seed=100 * round_ + k)
                if not setting:
                    cal[(fmt, depth)] = got
                    if CASES[0] in cal:
                        latency, idle = cal[CASES[0]]["request_s"], cal[CASES[0]]["idle_s_per_request"]
                rows.append(model.row(cal[(fmt, depth)], got, setting, (fmt, depth), latency, idle, capacity))
                print(f"  {fmt} in_flight {depth}: predicted {rows[-1]['before']:.1f} before, "
                      f"{rows[-1]['rate']:.1f} now, measured {got['rate']:.1f} samples/s "
                      f"(outside load {got['outside_pct'] or 0:.0f}%)", file=sys.stderr)
    return rows


def run(bandwidths: list[float], seconds: float, rounds: int, samples: int) -> list[dict]:
    """Every round over the unshaped calibration and the shaped settings, on a fresh dataset of
    ``samples``."""
    spec = DatasetSpec(samples=samples, seed=0, profile="cc3m", image_scale=0.5)
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="dlbench-bounds-") as work:
        paths: dict = {}
        for round_ in range(rounds):
            rows += sweep(paths, [0.0, *bandwidths], seconds, spec, work, round_)
    return rows
