"""The tables of ``--loader-only`` (harness.loaderonly.readpath's rows, as loader.jsonl and
decode.jsonl hold them): the read path alone per fields, against the RAM gather and the article's
reads, and decode + resize per image by source size."""
from __future__ import annotations

from harness.data.decoders import DECODERS
from harness.loaderonly.readpath import REF_ARTICLE, REF_RAM
from harness.loaderonly.rows import DecodeRow, LoaderRow
from harness.report.tables import Table, render_tables


def tables(rows: list[LoaderRow], decode: list[DecodeRow] | None = None) -> list[Table]:
    out = []
    for workload in dict.fromkeys(r.fields for r in rows):
        body = [[r.storage, r.cache_state, str(r.batch_size), f"{r.samples_per_s:,.0f}",
                 f"{r.mb_per_s:,.0f}", "-" if r.vs_ram is None else f"{r.vs_ram:.3f}x"]
                for r in rows if r.fields == workload]
        out.append(Table(f"Read path alone ({workload} fields; one process, random batches)",
                         ["storage", "cache", "batch", "samples/s", "MB/s", "vs RAM gather"], body,
                         notes=[f"{REF_RAM}: the same rows gathered from RAM (the limit); {REF_ARTICLE}: the first "
                                "article's per-row h5py reads. Cold: the batch's data dropped from the page cache."]))
    if decode:
        dec = {}
        for r in decode:
            dec.setdefault((r.source_long_side, r.images), {})[r.decoder] = r.ms_per_image
        out.append(Table(f"Decode + resize per image (longest side {decode[0].image_size}), by source size",
                         ["source longer side (px)", "images"] + [f"{d} ms" for d in DECODERS],
                         [[side, str(n)] + [f"{v.get(d, float('nan')):.3f}" for d in DECODERS]
                          for (side, n), v in dec.items()]))
    return out


def render(rows: list[LoaderRow], decode: list[DecodeRow] | None = None, fmt: str = "text") -> str:
    """The loader-only tables (and the decode table) as text or markdown."""
    return "\n".join(render_tables(tables(rows, decode), fmt))
