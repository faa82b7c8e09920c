"""Parquet storage: one ``data.parquet`` written with pyarrow, read a whole row group at a time.

Columns: ``index`` int64, ``jpg`` binary, ``txt`` string, ``image_emb``
fixed_size_list<float32>[2048], ``text_emb`` fixed_size_list<float32>[768]; row group k holds
samples [k*R, (k+1)*R) with R = ``row_group_size``. Sidecars: ``meta.json`` (count),
``row_groups.json`` (R) and ``stored_bytes.npy`` (per-sample bytes), so ``len()`` and cost
estimates never open the Parquet file.

Parquet cannot read one row: the smallest read is a column chunk of a row group. A batch is served
by reading each row group it touches once (only the requested columns) and taking its rows from it;
the last ``cached_groups`` decoded row groups are kept per reader and process, so a sequential
(shard-streaming) sampler reads every row group once while a random sampler reads up to one row
group per sample. The file is opened lazily in each process (a ``LazyHandle``) and read with
``use_threads=False``: DataLoader workers are the parallelism, and no Arrow thread pool state is
relied on across a fork.
"""
from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from strategies.params import choice, integer
from strategies.registry import register
from strategies.sample import FIELDS, IMAGE_EMB_DIM, TEXT_EMB_DIM, Sample
from strategies.storage.advice import MERGE_GAP, Advised, advise_fd, checked, fd_will_need, merged
from strategies.storage.base import (
    LazyHandle,
    PicklesUnmapped,
    StoredBytesSidecar,
    TrackedStorage,
    checked_fields,
    checked_indices,
    in_order,
    read_count,
    write_meta,
)

COLUMN = {"jpeg": "jpg", "caption": "txt", "image_emb": "image_emb", "text_emb": "text_emb"}
_EMB_DIMS = {"image_emb": IMAGE_EMB_DIM, "text_emb": TEXT_EMB_DIM}
COMPRESSIONS = ("none", "snappy", "zstd")


def schema() -> pa.Schema:
    return pa.schema([
        ("index", pa.int64()),
        ("jpg", pa.binary()),
        ("txt", pa.string()),
        ("image_emb", pa.list_(pa.float32(), IMAGE_EMB_DIM)),
        ("text_emb", pa.list_(pa.float32(), TEXT_EMB_DIM)),
    ])


def _table(rows: list[Sample]) -> pa.Table:
    emb = {name: np.stack([getattr(s, name) for s in rows]).astype("<f4", copy=False).reshape(-1)
           for name in _EMB_DIMS}
    return pa.Table.from_arrays([
        pa.array([s.index for s in rows], pa.int64()),
        pa.array([bytes(s.jpeg) for s in rows], pa.binary()),
        pa.array([s.caption for s in rows], pa.string()),
        pa.FixedSizeListArray.from_arrays(pa.array(emb["image_emb"], pa.float32()), IMAGE_EMB_DIM),
        pa.FixedSizeListArray.from_arrays(pa.array(emb["text_emb"], pa.float32()), TEXT_EMB_DIM),
    ], schema=schema())


class _Group:
    """One decoded row group: python bytes/str lists and float32 matrices, per requested field."""

    def __init__(self, table: pa.Table, fields: tuple[str, ...]):
        self.values: dict[str, object] = {}
        for field in fields:
            col = table.column(COLUMN[field]).combine_chunks()
            if field in _EMB_DIMS:
                flat = col.values.to_numpy(zero_copy_only=False)
                self.values[field] = np.asarray(flat, dtype=np.float32).reshape(len(col), _EMB_DIMS[field])
            else:
                self.values[field] = col.to_pylist()


class _OpenParquet:
    """The file opened by us (a descriptor the access hint goes on) and pyarrow's reader over
    it."""

    def __init__(self, path: Path, hint: str):
        self.source = pa.OSFile(str(path))
        advise_fd(self.source.fileno(), hint)
        self.file = pq.ParquetFile(self.source)

    def chunk_ranges(self, group: int, columns: list[str]) -> list[tuple[int, int]]:
        """The byte ranges of the column chunks ``columns`` of row group ``group``."""
        meta = self.file.metadata.row_group(group)
        names = set(columns)
        out = []
        for c in range(meta.num_columns):
            col = meta.column(c)
            if col.path_in_schema.split(".")[0] in names:
                start = col.dictionary_page_offset if col.has_dictionary_page else col.data_page_offset
                out.append((start, start + col.total_compressed_size))
        return out

    def close(self) -> None:
        self.file.close()
        self.source.close()


class ParquetReader(StoredBytesSidecar, Advised, PicklesUnmapped):
    """The file's descriptor carries the access hint; under any hint but "normal" the column chunks
    of the row groups a batch reads (and this process does not keep) are asked for
    (POSIX_FADV_WILLNEED) first."""

    def __init__(self, path: Path, fields: Sequence[str] = FIELDS, cached_groups: int = 4, advice: str = "auto"):
        self.path = Path(path)
        self.fields = checked_fields(fields)
        self.advice = checked(advice)
        self._count = read_count(self.path)
        with open(self.path / "row_groups.json") as f:
            self.row_group_size = int(json.load(f)["row_group_size"])
        self.cached_groups = cached_groups
        self._file = LazyHandle(self._open)
        self._groups = LazyHandle(OrderedDict)  # row group -> _Group, per process (emptied after a fork)
        self._stored: np.ndarray | None = None  # memory-mapped on first use; not pickled
        self.groups_read = 0  # row groups read from the file by this reader in this process (for tests)

    def _open(self) -> _OpenParquet:
        return _OpenParquet(self.path / "data.parquet", self.hint)

    def __len__(self) -> int:
        return self._count

    def _will_need(self, groups: list[int]) -> None:
        cache = self._groups.get()
        opened = self._file.get()
        columns = [COLUMN[f] for f in self.fields]
        ranges = [r for g in groups if g not in cache for r in opened.chunk_ranges(g, columns)]
        if ranges:
            fd_will_need(opened.source.fileno(), merged(ranges, MERGE_GAP[self.hint]))

    def _group(self, g: int, fresh: dict[int, _Group]) -> _Group:
        if g in fresh:
            return fresh[g]
        cache = self._groups.get()
        got = cache.get(g)
        if got is None:
            columns = [COLUMN[f] for f in self.fields]
            table = self._file.get().file.read_row_group(g, columns=columns, use_threads=False)
            got = _Group(table, self.fields)
            self.groups_read += 1
        fresh[g] = got
        return got

    def read_batch(self, indices: Sequence[int]) -> list[Sample]:
        idx = checked_indices(indices, self._count)
        out = [Sample(index=int(i)) for i in idx]
        if not idx.size or not self.fields:
            return out
        fresh: dict[int, _Group] = {}  # every row group of this batch, read once
        if self.hint != "normal":
            self._will_need(sorted({int(i) // self.row_group_size for i in idx.tolist()}))
        for s in out:
            g, r = divmod(s.index, self.row_group_size)
            group = self._group(g, fresh)
            for field in self.fields:
                value = group.values[field]
                setattr(s, field, value[r].copy() if field in _EMB_DIMS else value[r])
        # keep the last `cached_groups` row groups this batch touched, most recent last
        cache = self._groups.get()
        for g in list(fresh)[-self.cached_groups:] if self.cached_groups else []:
            cache[g] = fresh[g]
            cache.move_to_end(g)
        while len(cache) > self.cached_groups:
            cache.popitem(last=False)
        return out

    def close(self) -> None:
        self._file.close()
        self._groups.close()
        self._stored = None


@register("storage", "parquet")
class ParquetStorage(TrackedStorage):
    """``row_group_size``: rows per row group (the unit of every read); ``compression``: none,
    snappy (pyarrow's default) or zstd; ``cached_groups``: decoded row groups a reader keeps (per
    process); keep it above the ``shards`` sampler's buffer_size / row_group_size, the row groups
    its shuffle window spans."""

    name = "parquet"

    def __init__(self, row_group_size: int = 64, compression: str = "snappy", cached_groups: int = 4,
                 advice: str = "auto"):
        self.advice = checked(advice)  # the readers' access hint (strategies.storage.advice)
        self.row_group_size = integer("row_group_size", row_group_size, 1)
        self.compression = choice("compression", compression, COMPRESSIONS)
        self.cached_groups = integer("cached_groups", cached_groups, 0)

    @property
    def variant(self) -> str:
        """What the written files depend on besides the spec (not ``cached_groups``, a reader
        setting)."""
        return f"-rg{self.row_group_size}-{self.compression}"

    def write(self, samples: Iterable[Sample], path: Path, count: int) -> None:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        stored = np.zeros(count, dtype=np.int64)
        fixed = 4 * (IMAGE_EMB_DIM + TEXT_EMB_DIM)
        compression = None if self.compression == "none" else self.compression
        # dictionary encoding only wastes time on unique blobs and random floats
        with pq.ParquetWriter(str(path / "data.parquet"), schema(), compression=compression,
                              use_dictionary=False, write_statistics=["index"]) as writer:
            rows: list[Sample] = []
            for i, s in in_order(samples, count):
                stored[i] = len(s.jpeg) + len(s.caption.encode("utf-8")) + fixed + 8
                rows.append(s)
                if len(rows) == self.row_group_size:
                    writer.write_table(_table(rows), row_group_size=self.row_group_size)
                    rows = []
            if rows:
                writer.write_table(_table(rows), row_group_size=self.row_group_size)
        np.save(path / "stored_bytes.npy", stored)
        with open(path / "row_groups.json", "w") as f:
            json.dump({"row_group_size": self.row_group_size}, f)
        write_meta(path, "parquet", count)

    def open(self, path: Path, fields: Sequence[str] = FIELDS) -> ParquetReader:
        return self.track(ParquetReader(path, fields, self.cached_groups, self.advice), path)

    def shard_ranges(self, path: Path) -> list[range]:
        """The index range of every row group, in order."""
        count = read_count(path)
        with open(Path(path) / "row_groups.json") as f:
            size = int(json.load(f)["row_group_size"])
        return [range(a, min(a + size, count)) for a in range(0, count, size)]

    def file_names(self, path: Path) -> list[str]:
        return ["meta.json", "row_groups.json", "stored_bytes.npy", "data.parquet"]
