"""The remote storage's table: per cell, its readers' figures over the measured window (the
remote_* figures and disk_hit_pct of cells.jsonl, medians over the visits), in the columns
harness.measure.remotecounters defines (COLUMNS, which remote.md's table uses too). Rows only for
cells that read a remote store; none for a run on local data."""
from __future__ import annotations

from harness.measure.remotecounters import COLUMNS, text
from harness.report.tables import Table, display_name, shown_axes
from harness.results.repeats import CellSummary

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
        rows.append([display_name(cells, c, a) for a in axes] + [text(f.get(key), spec) for _, key, spec in COLUMNS])
    return Table("Remote store (per sample, over the window)", [*axes, *(h for h, _, _ in COLUMNS)], rows,
                 [NOTE] if rows else [])
