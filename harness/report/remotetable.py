"""The remote storage's table: per cell, its readers' figures over the measured window (the remote_* figures
and disk_hit_pct of cells.jsonl, medians over the visits: harness.remote.counters). Rows only for cells
that read a remote store; none for a run on local data."""
from __future__ import annotations

from harness.report.tables import Table, display_name, fmt, shown_axes
from harness.results.cellresult import CellSummary

COLUMNS = (("req/sample", "remote_requests_per_sample", ".2f"), ("MB/sample", "remote_mb_per_sample", ".3f"),
           ("LIST/sample", "remote_lists_per_sample", ".3f"), ("lat p50 ms", "remote_latency_p50_ms", ".1f"),
           ("lat p99 ms", "remote_latency_p99_ms", ".1f"),
           ("net wait ms/sample/worker", "remote_wait_ms_per_sample", ".2f"), ("disk hit %", "disk_hit_pct", ".0f"),
           ("retries", "remote_retries", ".0f"))
NOTE = ("over each visit's measured window (warm-up excluded), medians over the visits; net wait: the time a "
        "reading worker was blocked on the store, per sample it read (litdata: the time in its reads, "
        "deserialising included); '-': not measured (litdata's own requests are not counted; no disk tier); the "
        "store's own cost per request is in the run's header (docs/remote.md)")


def remote_table(cells: list[CellSummary]) -> Table:
    axes = shown_axes(cells)
    rows = []
    for c in cells:
        f = c.figures
        if f.remote_wait_ms_per_sample is None:
            continue
        rows.append([display_name(cells, c, a) for a in axes] + [fmt(f.get(key), spec) for _, key, spec in COLUMNS])
    return Table("Remote store (per sample, over the window)", [*axes, *(h for h, _, _ in COLUMNS)], rows,
                 [NOTE] if rows else [])
