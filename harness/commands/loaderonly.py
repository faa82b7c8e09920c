"""``--loader-only``: the read path alone, per storage, against the machine's limit and the articles' code.

For each storage of the scenario's matrix (and each workload's fields), in this one process: random batches
of the scenario's batch size read through ``reader.read_batch``, with a warm page cache (every file pre-read)
and a cold one (before each timed batch the reader is closed, its files dropped from the page cache, the
reader reopened and the files dropped again, so only the batch's own data comes from the device). No
training, no DataLoader, no decode. Two reference rows are measured in the same run on the same batches:

* ``ref-ram-gather``: the limit. The same fields already in RAM (numpy arrays; for jpeg and caption one
  bytes buffer with offsets), gathered with one fancy index per array (one slice per sample for bytes).
* ``ref-article-hdf5``: the first article's Dataset: its own HDF5 file, written the article's way
  (resizable datasets, h5py's automatic chunking, the latest file format) from the same samples, opened
  once for single-writer-multiple-reader reading, then ``dataset[i]`` per row and per field, each row
  wrapped with ``torch.from_numpy``. The file (``<key>-article.h5`` in the data directory) is written once.
  h5py's automatic chunks for those shapes are (64, 128) and (64, 96): one row spans 16 (image) and 8 (text)
  chunks, which is much of why the article's reads are slow. Per-row reads of the hdf5 storage's 16-row
  chunks are a harder reference (tests/benchmarks: ``features-read-bs256``).

Each row: ``storage`` (the strategy's label, or a reference name), ``fields`` (``features`` or ``pixels``),
``cache_state``, ``batch_size``, ``samples_per_s``, ``mb_per_s`` (bytes delivered) and ``vs_ram`` (samples/s
over ``ref-ram-gather``'s, same fields and cache state, same run), and what was measured. ``run`` writes them
to ``loader.jsonl`` in the run directory; for the pixels fields it also times decode + resize per image by
source size (``decode.jsonl``). ``render`` gives the tables as text.
"""
from __future__ import annotations

import dataclasses
import inspect
import io
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TextIO

import h5py
import numpy as np
import torch
from PIL import Image

from harness.config.matrix import check_available
from harness.config.scenario import Scenario, StrategyChoice
from harness.data import pagecache
from harness.data.decoders import DECODERS, decode_resize
from harness.data.fields import FIELDS_FOR
from harness.data.generator import DatasetSpec
from harness.data.materialise import materialise
from harness.errors import UsageError
from harness.report.tables import Table, render_tables
from harness.results.loaderrows import DecodeRow, LoaderRow, write_rows
from strategies import registry
from strategies.sample import IMAGE_EMB_DIM, TEXT_EMB_DIM

REF_RAM = "ref-ram-gather"
REF_ARTICLE = "ref-article-hdf5"
CACHE_STATES = ("warm", "cold")
SIZE_BINS = (0, 256, 512, 1024)  # source image's longer side, px: <256, 256-511, 512-1023, >=1024


def _batches(count: int, batch_size: int, n: int, seed: int) -> list[np.ndarray]:
    """``n`` random batches: distinct indices within a batch (with replacement when the dataset is smaller)."""
    rng = np.random.default_rng(seed)
    replace = count < batch_size
    return [rng.choice(count, size=batch_size, replace=replace) for _ in range(n)]


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


def _timed(source, batches: list[np.ndarray], prepare: Callable[[], None] | None, seconds: float,
           min_batches: int) -> tuple[float, int, int]:
    """(seconds spent in ``source.read``, samples, bytes delivered) over the batches, stopping once
    ``seconds`` of reading and ``min_batches`` batches are done. Only the read is timed: ``prepare`` (run
    before each batch), the batch's conversion to what the source takes, and counting the bytes are not."""
    spent, samples, nbytes = 0.0, 0, 0
    for k, batch in enumerate(batches):
        if prepare is not None:
            prepare()
        arg = source.argument(batch)
        start = time.perf_counter()
        got = source.read(arg)
        spent += time.perf_counter() - start
        samples += len(batch)
        nbytes += source.nbytes(got)
        if spent >= seconds and k + 1 >= min_batches:
            break
    return spent, samples, nbytes


class _Source:
    """What is timed: ``read(argument(batch))``; ``nbytes`` of what it returned is counted untimed."""

    def argument(self, batch: np.ndarray):
        return batch

    def __call__(self, batch: np.ndarray):
        return self.read(self.argument(batch))


class _Reader(_Source):
    """A storage reader (given the batch as a list of ints, as a DataLoader hands it), reopenable."""

    def __init__(self, storage, path: Path, fields: Sequence[str]):
        self.storage, self.path, self.fields = storage, path, fields
        self.reader = storage.open(path, fields=fields)

    def argument(self, batch: np.ndarray) -> list[int]:
        return batch.tolist()

    def read(self, indices: list[int]) -> list:
        return self.reader.read_batch(indices)

    @staticmethod
    def nbytes(samples: list) -> int:
        return sum(s.nbytes for s in samples)

    def reopen(self) -> None:
        self.reader.close()
        self.reader = self.storage.open(self.path, fields=self.fields)

    def close(self) -> None:
        self.reader.close()


class _RamGather(_Source):
    """The fields in RAM, read once from the mmap materialisation; a batch is one gather per array."""

    def __init__(self, path: Path, fields: Sequence[str]):
        self.arrays = {f: np.load(path / f"{f}.npy") for f in fields if f.endswith("_emb")}
        self.flat = {f: ((path / f"{f}.bin").read_bytes(), np.load(path / f"{f}_offsets.npy"))
                     for f in fields if not f.endswith("_emb")}

    def read(self, batch: np.ndarray) -> list:
        out = [a[batch] for a in self.arrays.values()]
        for flat, offs in self.flat.values():
            out.append([flat[a:b] for a, b in zip(offs[batch].tolist(), offs[batch + 1].tolist())])
        return out

    @staticmethod
    def nbytes(got: list) -> int:
        return sum(x.nbytes if isinstance(x, np.ndarray) else sum(map(len, x)) for x in got)

    def reopen(self) -> None:  # RAM has no cold state
        pass

    def close(self) -> None:
        pass


ARTICLE_WRITE_BATCH = 10_000  # the article converts in batches of this many rows


def article_file(spec: DatasetSpec, data_dir: Path, mmap_path: Path) -> Path:
    """The article's HDF5 file of this spec, written once from the mmap materialisation: datasets created
    empty and resizable (h5py chooses the chunks), grown and written a batch at a time."""
    path = Path(data_dir) / f"{spec.key()}-article.h5"
    if path.exists():
        return path
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    reader = registry.create("storage", "mmap").open(mmap_path)
    try:
        with h5py.File(tmp, "w", libver="latest") as f:
            dsets = {name: f.create_dataset(name, shape=(0, dim), maxshape=(None, dim), dtype=np.float32)
                     for name, dim in (("image_emb", IMAGE_EMB_DIM), ("text_emb", TEXT_EMB_DIM))}
            dsets["jpeg"] = f.create_dataset("jpeg", shape=(0,), maxshape=(None,), dtype=h5py.vlen_dtype(np.uint8))
            dsets["caption"] = f.create_dataset("caption", shape=(0,), maxshape=(None,),
                                                dtype=h5py.string_dtype("utf-8"))
            for a in range(0, len(reader), ARTICLE_WRITE_BATCH):
                got = reader.read_batch(range(a, min(len(reader), a + ARTICLE_WRITE_BATCH)))
                b = a + len(got)
                for name, ds in dsets.items():
                    ds.resize(b, axis=0)
                    if name == "jpeg":
                        column = np.empty(len(got), dtype=object)
                        column[:] = [np.frombuffer(s.jpeg, dtype=np.uint8) for s in got]
                    elif name == "caption":
                        column = np.array([s.caption for s in got], dtype=object)
                    else:
                        column = np.stack([getattr(s, name) for s in got])
                    ds[a:b] = column
        os.replace(tmp, path)
    finally:
        reader.close()
        if tmp.exists():
            tmp.unlink()
    return path


class _ArticleHdf5(_Source):
    """The first article's Dataset: one h5py file, ``dataset[i]`` per row and per field."""

    def __init__(self, path: Path, fields: Sequence[str]):
        self.path, self.fields = path, fields
        self.reopen()

    def reopen(self) -> None:
        if getattr(self, "file", None) is not None:
            self.file.close()
        self.file = h5py.File(self.path, "r", libver="latest", swmr=True)
        self.dsets = [self.file[f] for f in self.fields]

    def argument(self, batch: np.ndarray) -> list[int]:
        return batch.tolist()

    def read(self, indices: list[int]) -> list:
        out = []
        for i in indices:  # the article's __getitem__, once per index
            row = [ds[i] for ds in self.dsets]
            out.append([torch.from_numpy(x) if isinstance(x, np.ndarray) and x.dtype != object else x
                        for x in row])
        return out

    @staticmethod
    def nbytes(got: list) -> int:
        return sum(x.numel() * x.element_size() if isinstance(x, torch.Tensor) else len(x)
                   for row in got for x in row)

    def close(self) -> None:
        self.file.close()
        self.file = None


def _measure(name: str, source, files: list[Path], fields_name: str, state: str, batches: list[np.ndarray],
             seconds: float, cold_batches: int) -> LoaderRow:
    row = LoaderRow(name, fields_name, state, len(batches[0]))
    if state == "warm" or not files:
        pagecache.warm(files)
        for batch in batches[:3]:  # warm-up: first-use opens, lazy maps
            source(batch)
        spent, samples, nbytes = _timed(source, batches[3:], None, seconds, min_batches=5)
    else:
        verified: list[bool] = []

        def go_cold() -> None:
            source.reopen()
            source(batches[0][:1])  # open the files, read their metadata
            verified.append(pagecache.prepare(files, "cold")["verified"])

        spent, samples, nbytes = _timed(source, batches[1:cold_batches + 1], go_cold, seconds, min_batches=1)
        row.cold_verified = all(verified)
    return dataclasses.replace(row, samples=samples, seconds=round(spent, 6),
                               samples_per_s=samples / spent if spent else None,
                               mb_per_s=nbytes / spent / 1e6 if spent else None)


def _with_ratios(rows: list[LoaderRow]) -> list[LoaderRow]:
    ram = {(r.fields, r.cache_state): r.samples_per_s for r in rows if r.storage == REF_RAM}
    for r in rows:
        limit = ram.get((r.fields, r.cache_state))
        r.vs_ram = r.samples_per_s / limit if limit and r.samples_per_s else None
    return rows


def decode_rows(path: Path, image_size: int, count: int, per_bin: int = 40, repeats: int = 3) -> list[DecodeRow]:
    """Decode + resize time per image, by the source's longer side, for each decoder (mmap materialisation)."""
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
    rows = []
    for b, jpegs in picked.items():
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


def run(scenario: Scenario, data_dir: Path, run_dir: Path, cache_states: Sequence[str] = CACHE_STATES, *,
        workloads: Sequence[str] | None = None, batch_size: int | None = None, seconds: float = 1.0,
        batches: int = 400, cold_batches: int = 8, seed: int = 0, progress: bool = False,
        out: TextIO | None = sys.stdout) -> list[LoaderRow]:
    """Time every storage's read path (and the two references) per fields and cache state; write
    ``loader.jsonl`` (and ``decode.jsonl`` for pixels) in ``run_dir``; print the tables to ``out``."""
    for state in cache_states:
        if state not in CACHE_STATES:
            raise UsageError(f"cache state {state!r} for --loader-only; choose from {', '.join(CACHE_STATES)}")
    spec, tr = scenario.dataset, scenario.training
    bs = batch_size or tr.batch_size
    data_dir, run_dir = Path(data_dir), Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    choices = list(scenario.matrix.get("storage", [])) or [StrategyChoice("storage", "raw")]
    check_available(choices, remedy=False)  # --loader-only times every storage of the matrix
    paths = {c.label: _materialised(spec, c, data_dir, progress) for c in choices}
    mmap_path = materialise(spec, "mmap", data_dir, progress=progress)  # the RAM reference's source
    article = article_file(spec, data_dir, mmap_path)
    todo = list(workloads or (tr.workload,))
    rows: list[LoaderRow] = []
    decode: list[DecodeRow] = []
    for workload in todo:
        fields = FIELDS_FOR[workload]
        sets = _batches(spec.samples, bs, batches, seed)
        sources = [(REF_RAM, lambda f=fields: _RamGather(mmap_path, f), [])]
        for c in choices:
            storage = c.create()
            path = paths[c.label]
            sources.append((c.label, lambda s=storage, p=path, f=fields: _Reader(s, p, f), storage.files(path)))
        sources.append((REF_ARTICLE, lambda f=fields: _ArticleHdf5(article, f), [article]))
        for state in cache_states:
            for name, make, files in sources:
                source = make()
                try:
                    rows.append(_measure(name, source, files, workload, state, sets, seconds, cold_batches))
                finally:
                    source.close()
        if workload == "pixels":
            decode += decode_rows(mmap_path, tr.image_size, spec.samples)
    rows = _with_ratios(rows)
    write_rows(run_dir / "loader.jsonl", rows)
    if decode:
        write_rows(run_dir / "decode.jsonl", decode)
    if out is not None:
        out.write(render(rows, decode) + "\n")
    return rows


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
