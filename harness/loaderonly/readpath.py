"""The read-path benchmark of ``--loader-only``: the read path alone, per storage, against the
machine's limit and the articles' code.

For each storage of the scenario's matrix (and each workload's fields), in this one process: random
batches of the scenario's batch size read through ``reader.read_batch``, with a warm page cache
(every file pre-read) and a cold one (before each timed batch the reader is closed, its files
dropped from the page cache, the reader reopened and the files dropped again, so only the batch's
own data comes from the device). No training, no DataLoader, no decode. Two reference rows are
measured in the same run on the same batches (the sources and the timing loop:
harness.loaderonly.sources):

* ``ref-ram-gather``: the limit. The same fields already in RAM, gathered with one fancy index per
  array.
* ``ref-article-hdf5``: the first article's Dataset: its own HDF5 file, written the article's way
  from the same samples (``<key>-article.h5`` in the data directory, written once), then
  ``dataset[i]`` per row and per field. h5py's automatic chunks for those shapes are (64, 128) and
  (64, 96): one row spans 16 (image) and 8 (text) chunks, which is much of why the article's reads
  are slow. Per-row reads of the hdf5 storage's 16-row chunks are a harder reference
  (tests/benchmarks: ``features-read-bs256``).

Each row (harness.loaderonly.rows.LoaderRow): ``storage`` (the strategy's label, or a reference
name), ``fields`` (``features`` or ``pixels``), ``cache_state``, ``batch_size``, ``samples_per_s``,
``mb_per_s`` (bytes delivered) and ``vs_ram`` (samples/s over ``ref-ram-gather``'s, same fields and
cache state, same run). For the pixels fields it also times decode + resize per image by source
size (DecodeRow).

It lives in the run wing because it needs the scenario (config), the materialisations and the page
cache (data) and the rows it returns (results), besides the sources it times (measure).
"""
from __future__ import annotations

import dataclasses
import inspect
import io
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from PIL import Image

from harness.config.matrix import check_available
from harness.config.scenario import Scenario, StrategyChoice
from harness.data import pagecache
from harness.data.decoders import DECODERS, decode_resize
from harness.data.fields import FIELDS_FOR
from harness.data.generator import DatasetSpec
from harness.data.materialise import materialise
from harness.errors import UsageError
from harness.loaderonly.rows import DecodeRow, LoaderRow
from harness.loaderonly.sources import (
    ArticleHdf5,
    RamGather,
    ReadSource,
    StorageReads,
    random_batches,
    timed,
    write_article_file,
)
from strategies import registry
from strategies.sample import IMAGE_EMB_DIM, TEXT_EMB_DIM

REF_RAM = "ref-ram-gather"
REF_ARTICLE = "ref-article-hdf5"
CACHE_STATES = ("warm", "cold")
SIZE_BINS = (0, 256, 512, 1024)  # source image's longer side, px: <256, 256-511, 512-1023, >=1024


def check_cache_states(cache_states: Sequence[str]) -> None:
    for state in cache_states:
        if state not in CACHE_STATES:
            raise UsageError(f"cache state {state!r} for --loader-only; choose from {', '.join(CACHE_STATES)}")


def _materialised(spec: DatasetSpec, choice: StrategyChoice, data_dir: Path, progress: bool) -> Path:
    """The storage's directory; a storage whose parameters change its files (a ``variant``) needs a
    materialise that takes the parameters."""
    variant = getattr(choice.create(), "variant", "")
    if variant == getattr(registry.create("storage", choice.name), "variant", ""):  # the default's files
        return materialise(spec, choice.name, data_dir, progress=progress)
    if "params" not in inspect.signature(materialise).parameters:
        raise UsageError(f"storage {choice.label} writes different files from the default {choice.name}, "
                         f"and this materialise cannot key them apart yet; leave it out of --loader-only")
    return materialise(spec, choice.name, data_dir, progress=progress, params=dict(choice.params))


def article_file(spec: DatasetSpec, data_dir: Path, mmap_path: Path) -> Path:
    """The article's HDF5 file of this spec (``<key>-article.h5``), written once from the mmap
    materialisation (harness.loaderonly.sources.write_article_file)."""
    path = Path(data_dir) / f"{spec.key()}-article.h5"
    if path.exists():
        return path
    reader = registry.create("storage", "mmap").open(mmap_path)
    try:
        return write_article_file(path, reader, {"image_emb": IMAGE_EMB_DIM, "text_emb": TEXT_EMB_DIM})
    finally:
        reader.close()


def measure_row(name: str, source: ReadSource, files: list[Path], fields_name: str, state: str,
                batches: list[np.ndarray], seconds: float, cold_batches: int) -> LoaderRow:
    """One source timed in one cache state: warm (the files pre-read, 3 batches of warm-up) or cold
    (before each batch the source reopened, its files dropped from the page cache and the drop
    verified)."""
    row = LoaderRow(name, fields_name, state, len(batches[0]))
    if state == "warm" or not files:
        pagecache.warm(files)
        for batch in batches[:3]:  # warm-up: first-use opens, lazy maps
            source(batch)
        spent, samples, nbytes = timed(source, batches[3:], None, seconds, min_batches=5)
    else:
        verified: list[bool] = []

        def go_cold() -> None:
            source.reopen()
            source(batches[0][:1])  # open the files, read their metadata
            verified.append(pagecache.prepare(files, "cold")["verified"])

        spent, samples, nbytes = timed(source, batches[1:cold_batches + 1], go_cold, seconds, min_batches=1)
        row.cold_verified = all(verified)
    return dataclasses.replace(row, samples=samples, seconds=round(spent, 6),
                               samples_per_s=samples / spent if spent else None,
                               mb_per_s=nbytes / spent / 1e6 if spent else None)


def with_ratios(rows: list[LoaderRow]) -> list[LoaderRow]:
    """Each row's samples/s over ref-ram-gather's of the same fields and cache state (vs_ram)."""
    ram = {(r.fields, r.cache_state): r.samples_per_s for r in rows if r.storage == REF_RAM}
    for r in rows:
        limit = ram.get((r.fields, r.cache_state))
        r.vs_ram = r.samples_per_s / limit if limit and r.samples_per_s else None
    return rows


def _pick_by_size(path: Path, count: int, per_bin: int) -> dict[int, list[bytes]]:
    """Up to ``per_bin`` JPEGs of the mmap materialisation per bin of the source's longer side."""
    reader = registry.create("storage", "mmap").open(path, fields=("jpeg",))
    try:
        picked: dict[int, list[bytes]] = {b: [] for b in SIZE_BINS}
        for start in range(0, count, 256):
            for s in reader.read_batch(list(range(start, min(count, start + 256)))):
                side = max(Image.open(io.BytesIO(s.jpeg)).size)
                b = max(x for x in SIZE_BINS if side >= x)
                if len(picked[b]) < per_bin:
                    picked[b].append(s.jpeg)
            if all(len(v) >= per_bin for v in picked.values()):
                break
    finally:
        reader.close()
    return picked


def decode_rows(path: Path, image_size: int, count: int, per_bin: int = 40, repeats: int = 3) -> list[DecodeRow]:
    """Decode + resize time per image, by the source's longer side, for each decoder (mmap
    materialisation)."""
    rows = []
    for b, jpegs in _pick_by_size(path, count, per_bin).items():
        if not jpegs:
            continue
        hi = SIZE_BINS[SIZE_BINS.index(b) + 1] if b != SIZE_BINS[-1] else None
        label = f">= {b}" if hi is None else f"{b}-{hi - 1}"
        for decoder in DECODERS:
            for jpeg in jpegs[:3]:
                decode_resize(jpeg, image_size, decoder)
            best = None
            for _ in range(repeats):
                start = time.perf_counter()
                for jpeg in jpegs:
                    decode_resize(jpeg, image_size, decoder)
                took = (time.perf_counter() - start) / len(jpegs)
                best = took if best is None else min(best, took)
            rows.append(DecodeRow(label, len(jpegs), decoder, image_size, best * 1e3))
    return rows


def benchmark(scenario: Scenario, data_dir: Path, cache_states: Sequence[str] = CACHE_STATES, *,
              workloads: Sequence[str] | None = None, batch_size: int | None = None, seconds: float = 1.0,
              batches: int = 400, cold_batches: int = 8, seed: int = 0,
              progress: bool = False) -> tuple[list[LoaderRow], list[DecodeRow]]:
    """Time every storage's read path (and the two references) per fields and cache state; the rows
    (with vs_ram) and, for the pixels fields, the decode rows."""
    check_cache_states(cache_states)
    spec, tr = scenario.dataset, scenario.training
    bs = batch_size or tr.batch_size
    data_dir = Path(data_dir)
    choices = list(scenario.matrix.get("storage", [])) or [StrategyChoice("storage", "raw")]
    check_available(choices, remedy=False)  # --loader-only times every storage of the matrix
    paths = {c.label: _materialised(spec, c, data_dir, progress) for c in choices}
    mmap_path = materialise(spec, "mmap", data_dir, progress=progress)  # the RAM reference's source
    article = article_file(spec, data_dir, mmap_path)
    rows: list[LoaderRow] = []
    decode: list[DecodeRow] = []
    for workload in list(workloads or (tr.workload,)):
        fields = FIELDS_FOR[workload]
        sets = random_batches(spec.samples, bs, batches, seed)
        sources = [(REF_RAM, lambda f=fields: RamGather(mmap_path, f), [])]
        for c in choices:
            storage = c.create()
            path = paths[c.label]
            sources.append((c.label, lambda s=storage, p=path, f=fields: StorageReads(s, p, f), storage.files(path)))
        sources.append((REF_ARTICLE, lambda f=fields: ArticleHdf5(article, f), [article]))
        for state in cache_states:
            for name, make, files in sources:
                source = make()
                try:
                    rows.append(measure_row(name, source, files, workload, state, sets, seconds, cold_batches))
                finally:
                    source.close()
        if workload == "pixels":
            decode += decode_rows(mmap_path, tr.image_size, spec.samples)
    return with_ratios(rows), decode
