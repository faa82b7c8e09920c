"""Pure: the model side of `check-remote`, the target model's storage bounds against the project's
own shaped store (the measuring side is sweep.py beside it). A case is a storage format read by one
process (no DataLoader: the model's one worker) in random batches of BATCH samples at a number of
requests in flight:

    webdataset  in_flight 1   one small range GET per sample: the store's own latency per request
    parquet     in_flight 1   a row group (~1 MB) per request for a few of its rows:
                              bandwidth-heavy
    raw         in_flight 1   one GET per sample and field, one at a time: the latency bound
    raw         in_flight 8   the same GETs, 8 at a time: the requests-in-flight term and
                              the store's capacity

The prediction is harness.analysis.checkcases' (its cost building and target, predict_case) with
the storage's figures: a cold read costs io = bytes/sample / bandwidth + requests/sample x latency
/ q, q = the requests in flight (up to a batch's), on top of the reader's own time per sample (the
"loader workers" bound with one worker); the store serves at most its capacity in requests/s
("storage ops/s"); "storage bandwidth" is bandwidth / bytes. Every input comes from the first,
unshaped setting only (the calibration) and the store's own probe there, never from a shaped
setting:

    own time per sample   the reader's CPU per sample (time.process_time over the window: its
                          client's work on each request included, which no request in flight hides:
                          one process, one GIL)
    latency               the small range GETs' wall time outside that CPU (webdataset, in_flight
                          1): (wall - CPU) / requests
    store capacity        1 / the moto process's CPU per small GET
                          (harness.lab.server.request_cost, run at the calibration): one CPU-bound
                          process
    bytes, requests       per sample, each case's own

"before" is the model as it was, with the inputs it had: own time (wall - wait) / samples, latency
the GETs' whole wall time, no in-flight term, no capacity. The table prints both predictions, the
measured rate and the errors; the calibration rows are flagged ("copy" where the row is its own
input), and "link as a cap alone" is the model with bytes / bandwidth taken off each request's path
and kept as the storage bandwidth bound: what tbf does while a response fits its burst
(harness.lab.link.TBF_BURST).
"""
from __future__ import annotations

import numpy as np

from harness.analysis.checkcases import Bench, CheckCase, case_costs, case_target, predict_case
from harness.analysis.targetmodel import Costs, io_seconds
from harness.config.accelerators import get_accelerator

CASES = (("webdataset", 1), ("parquet", 1), ("raw", 1), ("raw", 8))
BATCH = 16
ACCELERATOR = "H200"  # a device fast enough that the storage binds
CORES = 64.0  # the target's cores: no CPU bound but the one reading process's
CASE = CheckCase("remote read", world_size=1, workers=1, batch_size=BATCH, storage="s3", cache_state="cold")


def predicted(cal: dict, latency_s: float, bandwidth: float, in_flight: int = 1,
              store_gets_s: float = 0.0, own: str = "own_s_per_sample") -> tuple[float, float, str, float]:
    """(samples/s, io seconds per sample, the bound that binds, the storage bandwidth bound) from
    the calibration's costs of the case; ``in_flight``: the case's requests at once per worker;
    ``store_gets_s``: the store's own request capacity (the model's storage IOPS; 0: unlimited).
    in_flight 1 and no capacity: the model before it had either; ``own``: the calibration's figure
    taken as the reader's own seconds per sample."""
    calib = Costs(workload="pixels", loader_s=cal[own], rank_s=0.0, bytes_per_sample=cal["bytes_per_sample"],
                  requests_per_sample=cal["requests_per_sample"], in_flight=in_flight)
    store = Bench({}, {}, {}, disk_mb_s=bandwidth, disk_latency_ms=1000 * latency_s, storage_iops=store_gets_s)
    accelerator = get_accelerator(ACCELERATOR)
    p = predict_case(calib, CASE, CASE, store, accelerator, CORES)
    io = io_seconds(case_costs(calib, CASE, CASE, store), case_target(CASE, accelerator, CORES, store))
    return p.per_rank, io, p.binds, p.bounds["storage bandwidth"]


def link_caps_only(cal: dict, latency_s: float, bandwidth: float, in_flight: int, store_gets_s: float,
                   own: str = "own_s_per_sample") -> float:
    """The same model with the link as a cap alone (bytes / bandwidth not on each request's path):
    what tbf does while a response fits its burst (harness.lab.link.TBF_BURST). For the table, not
    the model."""
    unshaped = predicted(cal, latency_s, 0.0, in_flight, store_gets_s, own)[0]
    bound = bandwidth * 1e6 / cal["bytes_per_sample"] if bandwidth and cal["bytes_per_sample"] else float("inf")
    return min(unshaped, bound)


def row(cal: dict, got: dict, setting: float, case: tuple[str, int], latency: float, idle: float,
        capacity: float) -> dict:
    """One measured case beside its predictions, from its calibration ``cal`` (the unshaped
    setting's)."""
    depth = case[1]
    before = predicted(cal, latency, setting)[0]
    rate, io, binds, bw_bound = predicted(cal, idle, setting, depth, capacity, own="cpu_s_per_sample")
    return {"setting": setting, "case": case, "rate": rate, "io": io, "binds": binds, "bandwidth_bound": bw_bound,
            "before": before, "capacity": capacity,
            "caps_only": link_caps_only(cal, idle, setting, depth, capacity, "cpu_s_per_sample"),
            "got": got, "cal": cal, "latency": latency, "idle": idle}


def loads(group: list[dict]) -> str:
    return ", ".join(f"{r['got']['outside_pct'] or 0:.0f}" for r in group)


HEADER = ("| link | case | req/sample cal / meas | MB/sample cal / meas | MB/s moved | request ms (own) | "
          "io ms/sample pred / wait / idle meas | bandwidth bound samples/s | store bound samples/s | "
          "samples/s before | error % before | samples/s predicted | measured | error % | binds | "
          "link as a cap alone, error % | outside load % | note |")


def table(rows: list[dict]) -> list[str]:
    """Medians over the rounds, per setting and case: the model before the requests-in-flight term
    and the store's capacity, after, and with the link as a cap alone (the tbf burst's reading)."""
    out = [HEADER, "|" + " --- |" * 18]
    for setting, case in dict.fromkeys((r["setting"], r["case"]) for r in rows):
        out.append(_table_line([r for r in rows if (r["setting"], r["case"]) == (setting, case)]))
    return out


def _table_line(group: list[dict]) -> str:
    setting, case = group[0]["setting"], group[0]["case"]

    def med(f) -> float:
        return float(np.median([f(r) for r in group]))
    pred, meas, before = med(lambda r: r["rate"]), med(lambda r: r["got"]["rate"]), med(lambda r: r["before"])
    caps = med(lambda r: r["caps_only"])
    store = med(lambda r: r["capacity"] / r["cal"]["requests_per_sample"] if r["capacity"] else float("inf"))
    note = "" if setting else "calibration" + (" (copy: its costs are this row's)" if case == CASES[0] else "")
    return (f"| {f'{setting:g} MB/s (tbf)' if setting else 'unshaped'} | {case[0]}, in_flight {case[1]} | "
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


def notes(rows: list[dict], rounds: int) -> list[str]:
    """The lines above the table: the latency and own time the model takes now, the store's
    capacity per round, the latency setting."""
    latency = float(np.median([r["latency"] for r in rows]))
    idle = float(np.median([r["idle"] for r in rows]))
    capacity = [f"{r['capacity']:.0f}" for r in rows if not r["setting"] and r["case"] == CASES[0]]
    return [f"latency now: the same GETs' wall time outside the reader's own CPU (its client's work), "
            f"{1000 * idle:.2f} ms; the reader's own seconds per sample now: its CPU per sample (time.process_time)",
            f"store's own request capacity (1 / the moto process's CPU per small GET, its probe at each round's "
            f"calibration): {', '.join(capacity)} GETs/s",
            f"latency setting: the store's own, {1000 * latency:.2f} ms per small range GET (webdataset, in_flight "
            f"1, the unshaped calibration; median over {rounds} rounds); no netem on this kernel, so no latency "
            f"is shaped"]
