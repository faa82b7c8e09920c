"""The remote figures of a cell, from its reading processes' counters (the files
strategies.remote.rangesource writes into the run's counters folder, LaunchConfig.remote_counters,
one per process and reader, a line of cumulative counters after each batch, stamped with
perf_counter), merged over a whole run (each file's last line) or over a window [t0, t1] (per file,
its last line at or before t1 less its last line at or before t0):

| figure | meaning | | --- | --- | | requests / sample | range or object GETs sent, over the
samples the readers returned | | MB / sample | bytes those GETs brought back (10^6 bytes) | | LIST
/ sample | LIST calls (pages) made by the readers, over the samples | | latency p50 / p99 (ms) | of
every GET, from 5%-wide log bins (the bin's geometric middle) | | net wait / sample (ms) | seconds
the readers were blocked on the store (a batch's parallel GETs once), over samples | | disk hit % |
disk cache tier hits / (hits + misses); empty without a tier | | retries | throttled (503 SlowDown)
or 5xx answers retried with backoff | | client | the S3 client the reading processes used (obstore;
boto3 in a child forked after it; litdata's own) |

A reader that cannot count its requests (litdata's own) writes samples and wait only: where no
process of the merge counted requests, the request figures are None ("-").

The open's LIST (one per storage open in a rank, to refill a store that forgot its data) is set-up,
not counted here; ``remote_setup`` on the reader holds it.

``COLUMNS`` is the remote table's columns, the one list both of its tables use: the report's (per
cell, harness.report.remotetable) and remote.md's (per storage setting, harness.run.remoterun).
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from strategies.remote.s3client import LAT_BINS, LAT_MIN_S, LAT_STEP

COUNTERS = ("samples", "requests", "bytes", "lists", "retries", "puts", "wait_s", "disk_hits", "disk_misses")
UNCOUNTED = ("litdata",)  # clients whose requests the harness does not see
COLUMNS = (("req/sample", "remote_requests_per_sample", ".2f"), ("MB/sample", "remote_mb_per_sample", ".3f"),
           ("LIST/sample", "remote_lists_per_sample", ".3f"), ("lat p50 ms", "remote_latency_p50_ms", ".1f"),
           ("lat p99 ms", "remote_latency_p99_ms", ".1f"),
           ("net wait ms/sample/worker", "remote_wait_ms_per_sample", ".2f"), ("disk hit %", "disk_hit_pct", ".0f"),
           ("retries", "remote_retries", ".0f"))  # (header, the figure's name in cells.jsonl, its format)


@dataclass(frozen=True)
class RemoteFigures:
    samples: int
    requests_per_sample: float | None
    mb_per_sample: float | None
    lists_per_sample: float | None
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

    def values(self) -> dict:
        """The figures under their cells.jsonl names (harness.results.cellresult.Figures: remote_*,
        disk_hit_pct), as measured."""
        return {"remote_requests_per_sample": self.requests_per_sample, "remote_mb_per_sample": self.mb_per_sample,
                "remote_lists_per_sample": self.lists_per_sample, "remote_latency_p50_ms": self.latency_p50_ms,
                "remote_latency_p99_ms": self.latency_p99_ms, "remote_wait_ms_per_sample": self.wait_ms_per_sample,
                "disk_hit_pct": self.disk_hit_pct, "remote_retries": self.retries}

    def cell_figures(self) -> dict:
        """The figures a cells.jsonl line carries, rounded; the ones not measured left out."""
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in self.values().items()
                if not _missing(v)}


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def text(value: float | None, spec: str) -> str:
    """A figure as a table shows it: "-" where it was not measured."""
    return "-" if _missing(value) else format(value, spec)


def _lines(path: Path) -> list[dict]:
    """A counters file's lines (a line cut short by a process that died while writing it is
    skipped)."""
    out = []
    for text in path.read_text().splitlines():
        try:
            out.append(json.loads(text))
        except ValueError:
            continue
    return out


def _bins(one: dict) -> list[int]:
    bins = one.get("latency_bins") or {}
    if isinstance(bins, list):
        return list(bins)
    out = [0] * LAT_BINS
    for k, n in bins.items():
        out[int(k)] = n
    return out


def _last_at(lines: list[dict], t: float | None) -> dict | None:
    """The last line stamped at or before t (the last line when t is None)."""
    if t is None:
        return lines[-1] if lines else None
    before = [line for line in lines if line.get("t", 0.0) <= t]
    return before[-1] if before else None


def labels(folder: Path | str) -> list[str]:
    """The storage labels the folder's files were written by (one per distinct reader setting)."""
    return sorted({line.get("label", "") for p in Path(folder).glob("*.jsonl") for line in _lines(p)[:1]})


def merged(folder: Path | str, label: str | None = None, window: tuple[float, float] | None = None) -> dict:
    """Every process's counters summed (of one storage label, or all), the latency bins added, and
    how many files counted; over ``window`` (t0, t1: perf_counter seconds) only what each process
    counted between its last line at or before t0 and its last line at or before t1."""
    total = dict.fromkeys(COUNTERS, 0)
    total["latency_bins"] = [0] * LAT_BINS
    total["files"] = 0
    total["clients"] = set()
    total["counted"] = False
    for path in sorted(Path(folder).glob("*.jsonl")):
        lines = _lines(path)
        if not lines or (label is not None and lines[0].get("label", "") != label):
            continue
        end = _last_at(lines, window[1] if window else None)
        if end is None:
            continue
        start = _last_at(lines, window[0]) if window else None
        start = start or {}
        if window and end is start:
            continue  # nothing counted in the window
        for key in COUNTERS:
            total[key] += end.get(key, 0) - start.get(key, 0)
        total["latency_bins"] = [a + b - c for a, b, c in zip(total["latency_bins"], _bins(end), _bins(start))]
        total["files"] += 1
        client = str(end.get("client") or "").split(" ")[0]
        if client:
            total["clients"].add(client)
        total["counted"] = total["counted"] or client not in UNCOUNTED
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


def figures(folder: Path | str, label: str | None = None,
            window: tuple[float, float] | None = None) -> RemoteFigures:
    t = merged(folder, label, window)
    per = max(t["samples"], 1)
    looked = t["disk_hits"] + t["disk_misses"]
    counted = t["counted"]
    return RemoteFigures(
        samples=t["samples"], requests_per_sample=t["requests"] / per if counted else None,
        mb_per_sample=t["bytes"] / 1e6 / per if counted else None,
        lists_per_sample=t["lists"] / per if counted else None, latency_p50_ms=percentile_ms(t["latency_bins"], 50),
        latency_p99_ms=percentile_ms(t["latency_bins"], 99), wait_ms_per_sample=1000 * t["wait_s"] / per,
        disk_hit_pct=100 * t["disk_hits"] / looked if looked else None, retries=t["retries"],
        requests=t["requests"], processes=t["files"], clients="+".join(sorted(t["clients"])))


def visit_window(records, now: float) -> tuple[float, float] | None:
    """The measured window of a visit as perf_counter stamps: rank 0's own stamp of its end where
    the record carries it (`window_end_at`), else from the records gathered on rank 0 right after
    the gather (``now``): its window ended at least its pipeline's ``close`` and the ``gather``
    before now (what ran between, the record and the samplers' stop, is not counted: a window found
    so lies late by that much). It lasted ``window_s``. None for a visit without one (no step, or
    --decompose's several phases)."""
    first = records[0] if records else None
    if first is None or not first.window_s or first.phases:
        return None
    if getattr(first, "window_end_at", None) is not None:
        return first.window_end_at - first.window_s, first.window_end_at
    end = now - first.setup_s.get("gather", 0.0) - first.setup_s.get("close", 0.0)
    return end - first.window_s, end


def of_visit(folder: Path | str | None, records, now: float | None = None) -> dict:
    """A visit's remote figures over its measured window, as cells.jsonl's figures (RemoteFigures.
    cell_figures), from the readers' counters in ``folder`` (the run's
    LaunchConfig.remote_counters, set around a [remote] scenario); {} without one. perf_counter is
    CLOCK_MONOTONIC, one clock for every process of the machine, so rank 0's stamps and the
    workers' lines compare."""
    window = visit_window(records, time.perf_counter() if now is None else now)
    if not folder or window is None or not Path(folder).is_dir():
        return {}
    f = figures(folder, window=window)
    return f.cell_figures() if f.samples else {}
