"""The remote figures of a cell, from its reading processes' counters (the files strategies.remote.source
writes into the folder named by DLBENCH_REMOTE_STATS, one per process and reader), merged:

| figure | meaning |
| --- | --- |
| requests / sample | range or object GETs sent, over the samples the readers returned |
| MB / sample | bytes those GETs brought back (10^6 bytes) |
| LIST / sample | LIST calls (pages) made by the readers, over the samples |
| latency p50 / p99 (ms) | of every GET, from 5%-wide log bins (the bin's geometric middle) |
| net wait / sample (ms) | seconds the readers were blocked on the store (a batch's parallel GETs once), over samples |
| disk hit % | disk cache tier hits / (hits + misses); empty without a tier |
| retries | throttled (503 SlowDown) or 5xx answers retried with backoff |
| client | the S3 client the reading processes used (obstore; boto3 in a child forked from a process that used it) |

The open's LIST (one per storage open in a rank, to refill a store that forgot its data) is set-up, not counted
here; ``remote_setup`` on the reader holds it.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

from strategies.remote.s3client import LAT_BINS, LAT_MIN_S, LAT_STEP

COUNTERS = ("samples", "requests", "bytes", "lists", "retries", "puts", "wait_s", "disk_hits", "disk_misses")


@dataclass(frozen=True)
class RemoteFigures:
    samples: int
    requests_per_sample: float
    mb_per_sample: float
    lists_per_sample: float
    latency_p50_ms: float
    latency_p99_ms: float
    wait_ms_per_sample: float
    disk_hit_pct: float | None
    retries: int
    requests: int
    processes: int
    clients: str = ""  # the S3 clients the processes read through (obstore; boto3 in a child forked after it)

    def as_dict(self) -> dict:
        return asdict(self)


def labels(folder: Path | str) -> list[str]:
    """The storage labels the folder's files were written by (one per distinct reader setting)."""
    return sorted({json.loads(p.read_text()).get("label", "") for p in Path(folder).glob("*.json")})


def merged(folder: Path | str, label: str | None = None) -> dict:
    """Every process's counters summed (of one storage label, or all), the latency bins added, and how many
    files were read."""
    total = dict.fromkeys(COUNTERS, 0)
    total["latency_bins"] = [0] * LAT_BINS
    total["files"] = 0
    total["clients"] = set()
    for path in sorted(Path(folder).glob("*.json")):
        one = json.loads(path.read_text())
        if label is not None and one.get("label", "") != label:
            continue
        for key in COUNTERS:
            total[key] += one.get(key, 0)
        total["latency_bins"] = [a + b for a, b in zip(total["latency_bins"], one["latency_bins"])]
        total["files"] += 1
        if one.get("client"):
            total["clients"].add(one["client"].split(" ")[0])
    return total


def percentile_ms(bins: list[int], q: float) -> float:
    """The q-th percentile (0-100) of the binned latencies, in ms (nan when there are none)."""
    n = sum(bins)
    if not n:
        return math.nan
    rank, seen = q / 100 * n, 0
    for k, count in enumerate(bins):
        seen += count
        if seen >= rank and count:
            return 1000 * LAT_MIN_S * LAT_STEP ** (k + 0.5)
    return math.nan


def figures(folder: Path | str, label: str | None = None) -> RemoteFigures:
    t = merged(folder, label)
    per = max(t["samples"], 1)
    looked = t["disk_hits"] + t["disk_misses"]
    return RemoteFigures(
        samples=t["samples"], requests_per_sample=t["requests"] / per, mb_per_sample=t["bytes"] / 1e6 / per,
        lists_per_sample=t["lists"] / per, latency_p50_ms=percentile_ms(t["latency_bins"], 50),
        latency_p99_ms=percentile_ms(t["latency_bins"], 99), wait_ms_per_sample=1000 * t["wait_s"] / per,
        disk_hit_pct=100 * t["disk_hits"] / looked if looked else None, retries=t["retries"],
        requests=t["requests"], processes=t["files"], clients="+".join(sorted(t["clients"])))


HEADER = ("cell", "req/sample", "MB/sample", "LIST/sample", "lat p50 ms", "lat p99 ms", "net wait ms/sample",
          "disk hit %", "retries", "client")


def row(cell: str, f: RemoteFigures) -> list[str]:
    hit = "-" if f.disk_hit_pct is None else f"{f.disk_hit_pct:.0f}"
    return [cell, f"{f.requests_per_sample:.2f}", f"{f.mb_per_sample:.3f}", f"{f.lists_per_sample:.3f}",
            f"{f.latency_p50_ms:.1f}", f"{f.latency_p99_ms:.1f}", f"{f.wait_ms_per_sample:.2f}", hit,
            str(f.retries), f.clients or "-"]


def table(rows: list[list[str]]) -> str:
    """A markdown table of the rows under HEADER."""
    lines = ["| " + " | ".join(HEADER) + " |", "|" + " --- |" * len(HEADER)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)
