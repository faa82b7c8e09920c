"""The target model's storage bounds against the project's own shaped store: predicted, then measured.

    sudo python scripts/s3/bounds_check.py                       # bandwidth 0 (calibration), 20, 10, 5 MB/s
    sudo python scripts/s3/bounds_check.py --bandwidths 20 5 2 --seconds 8   # 2 MB/s: under the small cases' demand
    sudo python scripts/s3/bounds_check.py --bandwidths 40 10 2.5 --seconds 10

Root: the link is a network namespace and a veth pair shaped with tc (harness.remote.tier.session). One
reading process (this one, no DataLoader: the model's one worker) reads random batches of 16 samples of the
pixels workload's fields through the s3 storage, for each case:

    webdataset  in_flight 1   one small range GET per sample: the store's own latency per request
    parquet     in_flight 1   a row group (~1 MB) per request for a few of its rows: bandwidth-heavy
    raw         in_flight 1   one GET per sample and field, one at a time: the latency bound
    raw         in_flight 8   the same GETs, 8 at a time: the requests-in-flight term and the store's capacity

What the model takes (harness.analysis.targetmodel, the "loader workers" bound with one worker, the "storage
bandwidth" and "storage ops/s" bounds): a cold read costs io = bytes/sample / bandwidth + requests/sample x
latency / q, q = the requests in flight (up to a batch's), on top of the reader's own time per sample; the
store serves at most its capacity in requests/s. Every input comes from the first, unshaped setting only (the
calibration) and the store's own probe there, never from a shaped setting:

    own time per sample   the reader's CPU per sample (time.process_time over the window: its client's work
                          on each request included, which no request in flight hides: one process, one GIL)
    latency               the small range GETs' wall time outside that CPU (webdataset, in_flight 1):
                          (wall - CPU) / requests
    store capacity        1 / the moto process's CPU per small GET (harness.remote.server.request_cost,
                          run at the calibration): one CPU-bound process
    bytes, requests       per sample, each case's own

"before" is the model as it was, with the inputs it had: own time (wall - wait) / samples, latency the GETs'
whole wall time, no in-flight term, no capacity. This kernel has no sch_netem, so latency is never shaped
here: the latency setting is the store's measured one, labelled so. The table prints both predictions, the
measured rate and the errors; the calibration rows are flagged ("copy" where the row is its own input), and
"link as a cap alone" is the model with bytes / bandwidth taken off each request's path and kept as the
storage bandwidth bound: what tbf does while a response fits its burst (harness.remote.link.TBF_BURST).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from harness.analysis.targetmodel import Costs, io_seconds, predict  # noqa: E402
from harness.config.accelerators import get_accelerator  # noqa: E402
from harness.config.target import Target  # noqa: E402
from harness.remote import counters  # noqa: E402
from harness.data.fields import FIELDS_FOR  # noqa: E402
from harness.data.generator import DatasetSpec  # noqa: E402
from harness.data.materialise import materialise  # noqa: E402
from harness.remote.tier import RemoteSettings, session  # noqa: E402
from harness.remote.link import Shape  # noqa: E402
from harness.errors import UsageError  # noqa: E402
from harness.measure.hostload import HostLoad  # noqa: E402
from strategies import registry  # noqa: E402

CASES = (("webdataset", 1), ("parquet", 1), ("raw", 1), ("raw", 8))
BATCH = 16
FIELDS = FIELDS_FOR["pixels"]


def measure(path: Path, fmt: str, in_flight: int, seconds: float, seed: int) -> dict:
    """Random batches through the s3 storage's reader for about ``seconds`` (after two warm-up batches)."""
    storage = registry.create("storage", "s3", format=fmt, shard_size=64, in_flight=in_flight)
    reader = storage.open(path, fields=FIELDS)
    rng = np.random.default_rng(seed)
    n = len(reader)
    for _ in range(2):
        reader.read_batch(rng.choice(n, BATCH, replace=False).tolist())
    before = reader.remote_stats()
    load = HostLoad(root=os.getpid())  # this script and the store it started; its parent's tree is not the run's
    load.start()
    samples, t0, cpu0 = 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - t0 < seconds:
        samples += len(reader.read_batch(rng.choice(n, BATCH, replace=False).tolist()))
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    outside = load.stop()[0]
    after = reader.remote_stats()
    reader.close()
    requests = after["requests"] - before["requests"]
    wait = after["wait_s"] - before["wait_s"]
    bins = [a - b for a, b in zip(after["latency_bins"], before["latency_bins"])]
    return {"samples": samples, "rate": samples / wall, "wait_s_per_sample": wait / samples,
            "own_s_per_sample": (wall - wait) / samples, "requests_per_sample": requests / samples,
            "cpu_s_per_sample": cpu / samples, "idle_s_per_sample": max(0.0, wall - cpu) / samples,
            "idle_s_per_request": max(0.0, wall - cpu) / requests if requests else float("nan"),
            "bytes_per_sample": (after["bytes"] - before["bytes"]) / samples,
            "request_s": wait / requests if requests else float("nan"), "outside_pct": outside,
            "p50_ms": counters.percentile_ms(bins, 50)}


def predicted(cal: dict, latency_s: float, bandwidth: float, in_flight: int = 1,
              store_gets_s: float = 0.0, own: str = "own_s_per_sample") -> tuple[float, float, str, float]:
    """(samples/s, io seconds per sample, the bound that binds, the storage bandwidth bound) from the
    calibration's costs of the case; ``in_flight``: the case's requests at once per worker; ``store_gets_s``:
    the store's own request capacity (the model's storage IOPS; 0: unlimited). in_flight 1 and no capacity:
    the model before it had either; ``own``: the calibration's figure taken as the reader's own seconds per
    sample."""
    costs = Costs(workload="pixels", loader_s=cal[own], rank_s=0.0,
                  bytes_per_sample=cal["bytes_per_sample"], requests_per_sample=cal["requests_per_sample"],
                  in_flight=in_flight)
    target = Target(gpus_per_node=1, cores_per_node=64.0, accelerator="H200", storage_read_mb_s=bandwidth,
                    storage_latency_ms=1000 * latency_s, storage_iops=store_gets_s, page_cache="cold",
                    workers_per_rank=1, batch_size=BATCH)
    p = predict(costs, target, get_accelerator("H200"), advise=False)
    return p.per_rank, io_seconds(costs, target), p.binds, p.bounds["storage bandwidth"]


def link_caps_only(cal: dict, latency_s: float, bandwidth: float, in_flight: int, store_gets_s: float,
                   own: str = "own_s_per_sample") -> float:
    """The same model with the link as a cap alone (bytes / bandwidth not on each request's path): what tbf
    does while a response fits its burst (harness.remote.link.TBF_BURST). For the table, not the model."""
    unshaped = predicted(cal, latency_s, 0.0, in_flight, store_gets_s, own)[0]
    bound = bandwidth * 1e6 / cal["bytes_per_sample"] if bandwidth and cal["bytes_per_sample"] else float("inf")
    return min(unshaped, bound)


def sweep(paths: dict, settings: list[float], seconds: float, spec: DatasetSpec, work: str,
          round_: int) -> list[dict]:
    """One round: each setting in its own session (link, server), the cases one after another; the round's
    unshaped calibration predicts its shaped settings."""
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
                    if ("webdataset", 1) in cal:
                        latency = cal[("webdataset", 1)]["request_s"]
                        idle = cal[("webdataset", 1)]["idle_s_per_request"]
                before = predicted(cal[(fmt, depth)], latency, setting)[0]
                rate, io, binds, bw_bound = predicted(cal[(fmt, depth)], idle, setting, depth, capacity,
                                                      own="cpu_s_per_sample")
                rows.append({"setting": setting, "case": (fmt, depth), "rate": rate, "io": io, "binds": binds,
                             "bandwidth_bound": bw_bound, "before": before, "capacity": capacity,
                             "caps_only": link_caps_only(cal[(fmt, depth)], idle, setting, depth, capacity,
                                                         "cpu_s_per_sample"),
                             "got": got, "cal": cal[(fmt, depth)], "latency": latency, "idle": idle})
                print(f"  {fmt} in_flight {depth}: predicted {before:.1f} before, {rate:.1f} now, measured "
                      f"{got['rate']:.1f} samples/s "
                      f"(outside load {got['outside_pct'] or 0:.0f}%)", file=sys.stderr)
    return rows


def loads(group: list[dict]) -> str:
    return ", ".join(f"{r['got']['outside_pct'] or 0:.0f}" for r in group)


def table(rows: list[dict]) -> list[str]:
    """Medians over the rounds, per setting and case: the model before the requests-in-flight term and the
    store's capacity, after, and with the link as a cap alone (the tbf burst's reading)."""
    out = ["| link | case | req/sample cal / meas | MB/sample cal / meas | MB/s moved | request ms (own) | "
           "io ms/sample pred / wait / idle meas | bandwidth bound samples/s | store bound samples/s | "
           "samples/s before | error % before | samples/s predicted | measured | error % | binds | "
           "link as a cap alone, error % | "
           "outside load % | note |",
           "|" + " --- |" * 18]
    keys = list(dict.fromkeys((r["setting"], r["case"]) for r in rows))
    for setting, case in keys:
        group = [r for r in rows if (r["setting"], r["case"]) == (setting, case)]

        def med(f, group=group):
            return float(np.median([f(r) for r in group]))
        pred, meas, before = med(lambda r: r["rate"]), med(lambda r: r["got"]["rate"]), med(lambda r: r["before"])
        caps = med(lambda r: r["caps_only"])
        store = med(lambda r: r["capacity"] / r["cal"]["requests_per_sample"] if r["capacity"] else float("inf"))
        note = "" if setting else "calibration" + (" (copy: its costs are this row's)" if case == ("webdataset", 1)
                                                   else "")
        out.append(f"| {f'{setting:g} MB/s (tbf)' if setting else 'unshaped'} | {case[0]}, in_flight {case[1]} | "
                   f"{med(lambda r: r['cal']['requests_per_sample']):.2f} / "
                   f"{med(lambda r: r['got']['requests_per_sample']):.2f} | "
                   f"{med(lambda r: r['cal']['bytes_per_sample']) / 1e6:.3f} / "
                   f"{med(lambda r: r['got']['bytes_per_sample']) / 1e6:.3f} | "
                   f"{med(lambda r: r['got']['rate'] * r['got']['bytes_per_sample']) / 1e6:.2f} | "
                   f"{1000 * med(lambda r: r['got']['request_s']):.1f} | "
                   f"{1000 * med(lambda r: r['io']):.1f} / {1000 * med(lambda r: r['got']['wait_s_per_sample']):.1f} / "
                   f"{1000 * med(lambda r: r['got']['idle_s_per_sample']):.1f} | "
                   f"{med(lambda r: r['bandwidth_bound']):.1f} | {store:.1f} | {before:.1f} | "
                   f"{100 * (before - meas) / meas:+.1f} | {pred:.1f} | {meas:.1f} | "
                   f"{100 * (pred - meas) / meas:+.1f} | {group[0]['binds']} | {caps:.1f}, "
                   f"{100 * (caps - meas) / meas:+.1f} | {loads(group)} | {note} |")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bandwidths", type=float, nargs="+", default=[20.0, 10.0, 5.0],
                        help="shaped settings in MB/s (after the unshaped calibration)")
    parser.add_argument("--seconds", type=float, default=8.0, help="measured seconds per case and setting")
    parser.add_argument("--rounds", type=int, default=2, help="sweeps over every setting (medians reported)")
    parser.add_argument("--samples", type=int, default=512)
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("bounds_check.py: needs root (a network namespace and tc); run it with sudo", file=sys.stderr)
        return 2
    spec = DatasetSpec(samples=args.samples, seed=0, profile="cc3m", image_scale=0.5)
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="dlbench-bounds-") as work:
        paths: dict = {}
        for round_ in range(args.rounds):
            rows += sweep(paths, [0.0, *args.bandwidths], args.seconds, spec, work, round_)
    latency = float(np.median([r["latency"] for r in rows]))
    idle = float(np.median([r["idle"] for r in rows]))
    print(f"latency now: the same GETs' wall time outside the reader's own CPU (its client's work), "
          f"{1000 * idle:.2f} ms; the reader's own seconds per sample now: its CPU per sample (time.process_time)")
    capacity = [f"{r['capacity']:.0f}" for r in rows if not r["setting"] and r["case"] == CASES[0]]
    print(f"store's own request capacity (1 / the moto process's CPU per small GET, its probe at each round's "
          f"calibration): {', '.join(capacity)} GETs/s")
    print(f"latency setting: the store's own, {1000 * latency:.2f} ms per small range GET (webdataset, in_flight 1, "
          f"the unshaped calibration; median over {args.rounds} rounds); no netem on this kernel, so no latency "
          f"is shaped")
    print("\n".join(table(rows)))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except UsageError as err:
        print(f"bounds_check.py: {err}", file=sys.stderr)
        sys.exit(2)
