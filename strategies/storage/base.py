"""Helpers shared by the storages (the protocol itself is in :mod:`strategies.protocols`).

A storage writes a stream of samples into ``path`` (a directory it owns) and
opens a reader over it. Readers are created in the rank process but open their
files lazily, on first use in the process that reads (each DataLoader worker),
and reopen after a fork: file handles never cross ``fork``.
"""
from __future__ import annotations

import itertools
import json
import mmap
import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np

from strategies.protocols import Reader, Storage, StorageBase  # noqa: F401  (re-exported)
from strategies.sample import FIELDS, Sample
from strategies.storage import advice


class LazyHandle:
    """Opens a resource on first use in each process; reopens after fork."""

    def __init__(self, opener):
        self._opener = opener
        self._pid: int | None = None
        self._value = None

    def get(self):
        pid = os.getpid()
        if self._pid != pid:
            self._value = self._opener()
            self._pid = pid
        return self._value

    def close(self) -> None:
        value, self._value, self._pid = self._value, None, None
        if value is not None and hasattr(value, "close"):
            value.close()

    def __getstate__(self):
        return {"_opener": self._opener, "_pid": None, "_value": None}


class PicklesUnmapped:
    """A reader whose pickle carries no memory map: the attributes named in ``_mapped`` (arrays
    viewing a map, re-mapped lazily on next use) are pickled as None. A numpy view of a memory map
    pickles as a copy of its whole data, so without this every DataLoader worker that receives the
    reader by pickle (spawn, forkserver) would get a copy of e.g. ``stored_bytes`` instead of
    mapping it. Handles kept in a ``LazyHandle`` drop their value on their own."""

    _mapped: tuple[str, ...] = ("_stored",)

    def __getstate__(self):
        return dict(self.__dict__, **dict.fromkeys(self._mapped))


class StoredBytesSidecar:
    """``stored_bytes()`` from the materialisation's ``stored_bytes.npy``, memory-mapped on first
    use with the reader's access hint, so that a reader's memory does not grow with the dataset
    (PicklesUnmapped keeps the map out of the reader's pickle). The reader holds ``path``, ``hint``
    (Advised) and ``_stored`` (None until mapped; its ``close`` sets it back to None)."""

    def stored_bytes(self) -> np.ndarray:
        if self._stored is None:
            self._stored = load_mapped(self.path / "stored_bytes.npy", self.hint)
        return self._stored


class TrackedStorage(advice.Tracked, StorageBase):
    """The tail every built-in storage shares after ``write`` and ``open`` (whose readers it keeps
    with ``self.track``). ``shards(path)`` tells the readers opened on ``path`` that they will be
    read shard by shard (advice.Tracked: the harness asks only for a shard-streaming sampler), then
    returns ``shard_ranges(path)``: the storage's own shards as index ranges in order, or None, the
    default, for a storage without shards of its own (a shard-streaming sampler cuts fixed-size
    ranges). ``files(path)`` is ``path / name`` for each of the storage's ``file_names(path)``
    (relative to ``path``)."""

    def shards(self, path: Path) -> list[range] | None:
        self.streamed(path)
        return self.shard_ranges(path)

    def shard_ranges(self, path: Path) -> list[range] | None:
        return None

    def files(self, path: Path) -> list[Path]:
        path = Path(path)
        return [path / name for name in self.file_names(path)]

    def file_names(self, path: Path) -> list[str]:
        raise NotImplementedError(f"{type(self).__name__} lists no files")


def checked_fields(fields: Sequence[str]) -> tuple[str, ...]:
    """The fields as a tuple, or ValueError naming the unknown ones."""
    bad = [f for f in fields if f not in FIELDS]
    if bad:
        raise ValueError(f"unknown sample field(s) {bad}; fields are {', '.join(FIELDS)}")
    return tuple(fields)


def checked_indices(indices: Sequence[int], count: int) -> np.ndarray:
    """The indices as int64, or IndexError when one is outside [0, count)."""
    idx = np.asarray(indices, dtype=np.int64).reshape(-1)
    if idx.size and (idx.min() < 0 or idx.max() >= count):
        raise IndexError(f"indices out of range for {count} samples")
    return idx


def in_order(samples: Iterable[Sample], count: int) -> Iterator[tuple[int, Sample]]:
    """(index, sample) for a writer's stream, checking it holds exactly samples 0..count-1 in
    order."""
    n = 0
    for n, s in enumerate(samples, start=1):
        i = n - 1
        if i >= count:
            raise ValueError(f"more than the announced {count} samples")
        if s.index != i:
            raise ValueError(f"samples out of order: got index {s.index}, expected {i}")
        yield i, s
    if n != count:
        raise ValueError(f"got {n} samples, expected {count}")


def write_meta(path: Path, fmt: str, count: int, **extra) -> None:
    """meta.json: the storage format and sample count (so len() never opens the data files), and
    any storage-specific ``extra`` keys (e.g. hdf5's layout)."""
    with open(Path(path) / "meta.json", "w") as f:
        json.dump({"format": fmt, "version": 1, "count": count, **extra}, f)


def read_meta(path: Path) -> dict:
    with open(Path(path) / "meta.json") as f:
        return json.load(f)


def read_count(path: Path) -> int:
    return int(read_meta(path)["count"])


# ---- batched reads: one gather per field into a buffer allocated once per batch ----


def sorted_order(idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(order, idx[order]): a batch is read in file order; the j-th sorted row belongs to sample
    order[j]."""
    order = np.argsort(idx, kind="stable")
    return order, idx[order]


def gather_rows(array: np.ndarray, sorted_idx: np.ndarray) -> np.ndarray:
    """Rows ``sorted_idx`` of a 2-D array (a memory map) in one fancy index, into one preallocated
    buffer.

    ``mode="clip"`` lets numpy write straight into ``out`` (the indices are already checked); with
    the default ``"raise"`` it gathers into a temporary first.
    """
    out = np.empty((len(sorted_idx),) + array.shape[1:], dtype=array.dtype)
    np.take(array, sorted_idx, axis=0, out=out, mode="clip")
    return out


def in_request_order(items: Sequence, order: np.ndarray) -> list:
    """``items`` (one per sorted position) rearranged so that item k belongs to the k-th requested
    index."""
    out = [None] * len(items)
    for j, k in enumerate(order.tolist()):
        out[k] = items[j]
    return out


def slices(flat, offsets: np.ndarray, sorted_idx: np.ndarray, base: int = 0) -> list[bytes]:
    """``flat[base + offsets[i] : base + offsets[i + 1]]`` for each index: bytes, one copy each.

    ``flat`` is an ``mmap.mmap`` (slicing it copies straight into a new bytes object) or bytes.
    """
    starts = offsets[sorted_idx].tolist()
    ends = offsets[sorted_idx + 1].tolist()
    return [flat[base + a:base + b] for a, b in zip(starts, ends)]


def mapped_columns(fields: Sequence[str], flat: dict, arrays: dict, sorted_idx: np.ndarray, order: np.ndarray,
                   bases: dict[str, int] | None = None, hint: str = "normal",
                   ranges: dict | None = None) -> dict[str, list]:
    """A batch's per-field columns, in request order, from memory-mapped storage: the jpeg and
    caption bytes sliced from ``flat[name]`` at ``arrays[name + "_offsets"]`` (shifted by
    ``bases[name]``), the embeddings gathered from ``arrays[name]`` into one buffer each.
    ``ranges`` (Maps.ranges, filled under any hint but "normal"): every byte range the batch reads
    is asked for first (advice.FileRanges)."""
    columns: dict[str, list] = {}
    for name in fields if ranges else ():
        if name in ranges and name in ("jpeg", "caption"):
            ranges[name][0].slices(arrays[name + "_offsets"], sorted_idx, ranges[name][1], hint)
        elif name in ranges:
            ranges[name][0].rows(ranges[name][1], ranges[name][2], sorted_idx, hint)
    for name in ("jpeg", "caption"):
        if name in fields:
            got = slices(flat[name], arrays[name + "_offsets"], sorted_idx, (bases or {}).get(name, 0))
            if name == "caption":
                got = [b.decode("utf-8") for b in got]
            columns[name] = in_request_order(got, order)
    for name in ("image_emb", "text_emb"):
        if name in fields:
            columns[name] = in_request_order(list(gather_rows(arrays[name], sorted_idx)), order)
    return columns


def build_samples(indices: list[int], columns: dict[str, list]) -> list[Sample]:
    """Samples in request order from per-field columns (a field not read stays None)."""
    none = itertools.repeat(None)
    return [Sample(*row) for row in zip(indices, *(columns.get(f, none) for f in FIELDS))]


def map_file(path: str | Path, hint: str = "normal"):
    """A read-only ``mmap.mmap`` of a whole file (bytes for an empty file, which cannot be mapped),
    with the access hint (strategies.storage.advice) on it."""
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return b""
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    advice.advise_map(mm, hint)
    return mm


def load_mapped(path: str | Path, hint: str = "normal", maps: Maps | None = None,
                name: str | None = None) -> np.ndarray:
    """An .npy file memory-mapped (never loaded), as a plain ndarray view (no np.memmap subclass
    overhead), with the access hint on its map; with ``maps`` and ``name`` (and a hint other than
    "normal"), where its rows lie is recorded too (Maps.locate)."""
    array = np.load(path, mmap_mode="r")
    mm = advice.mapping_of(array)
    if mm is not None:
        advice.advise_map(mm, hint)
    if maps is not None and hint != "normal" and array.ndim == 2:
        maps.locate(name, path, array.offset, array.strides[0])
    return array.view(np.ndarray)


class Maps:
    """A process's open memory maps and the arrays viewing them; ``close`` drops the views, then
    unmaps."""

    def __init__(self):
        self.files: list = []
        self.arrays: dict[str, np.ndarray] = {}
        self.flat: dict = {}
        # field -> (advice.FileRanges of its file, file offset of the field's data, row bytes or 0 for a flat
        # byte buffer): where a batch's reads lie, to ask for them first (filled under any hint but "normal")
        self.ranges: dict[str, tuple[advice.FileRanges, int, int]] = {}
        self._descriptors: dict[str, advice.FileRanges] = {}

    def locate(self, name: str, path: str | Path, offset: int, row_bytes: int = 0) -> None:
        """Where field ``name``'s data lies: in ``path`` from ``offset``, in rows of ``row_bytes``
        (0: flat)."""
        key = os.path.realpath(path)
        if key not in self._descriptors:
            self._descriptors[key] = advice.FileRanges(path)
        self.ranges[name] = (self._descriptors[key], int(offset), int(row_bytes))

    def close(self) -> None:
        self.arrays.clear()
        self.flat.clear()
        self.ranges.clear()
        for d in self._descriptors.values():
            d.close()
        self._descriptors.clear()
        for m in self.files:
            if isinstance(m, mmap.mmap):
                try:
                    m.close()
                except BufferError:  # a view still exported: the map goes when its last view does
                    pass
        self.files.clear()
