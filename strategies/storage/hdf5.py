"""HDF5 storage: one ``data.h5``, in one of two layouts (the ``layout`` parameter).

``layout = "contiguous"`` (the default): fixed-size, contiguous, uncompressed datasets:
``image_emb`` float32[N, 2048], ``text_emb`` float32[N, 768], and ``jpeg`` and ``caption`` as flat
uint8 buffers with int64[N+1] ``jpeg_offsets`` / ``caption_offsets``. h5py gives each dataset's
byte offset in the file (``dset.id.get_offset()``); the reader maps the file once and reads every
field with numpy at memory speed, exactly like the ``mmap`` storage: the "HDF5 + memory mapping,
zero-copy reads" the articles promise (their per-row h5py reads do not do it).

``layout = "chunked"`` (the files of earlier versions, with the default ``chunk_rows``): every
dataset resizable along the first axis and chunked: ``jpeg`` vlen uint8 and ``caption`` vlen utf-8
string (256 rows a chunk), the embeddings ``chunk_rows`` rows a chunk, optionally ``compression =
"gzip"``. A batch reads each embedding chunk it touches once, whole and raw (``read_direct_chunk``:
no selection machinery, no chunk cache; gzip is inflated here), into one buffer, and gathers its
rows from there with one fancy index; the vlen fields take one fancy read per batch. No HDF5 call
is made per row.

The layouts are different files: ``variant`` names them (a directory suffix), and ``open`` refuses
a directory that holds another variant. Sidecars: ``meta.json`` (count, layout, variant) and
``stored_bytes.npy`` (per-sample bytes, memory-mapped), so ``len()`` and cost estimates never open
the HDF5 file. Files are opened lazily, in the reading process; any h5py handle a reader opened is
closed just before ``os.fork`` (the parent reopens on its next read), so no HDF5 file state crosses
a fork.
"""
from __future__ import annotations

import functools
import os
import weakref
import zlib
from collections.abc import Iterable, Sequence
from pathlib import Path

import h5py
import numpy as np

from strategies.params import choice, integer
from strategies.registry import register
from strategies.sample import FIELDS, IMAGE_EMB_DIM, TEXT_EMB_DIM, Sample
from strategies.storage.advice import Advised, checked
from strategies.storage.base import (
    LazyHandle,
    Maps,
    PicklesUnmapped,
    StoredBytesSidecar,
    TrackedStorage,
    build_samples,
    checked_fields,
    checked_indices,
    gather_rows,
    in_order,
    in_request_order,
    map_file,
    mapped_columns,
    read_meta,
    sorted_order,
    write_meta,
)

WRITE_BATCH = 512
_EMB_DIMS = {"image_emb": IMAGE_EMB_DIM, "text_emb": TEXT_EMB_DIM}
_VAR = ("jpeg", "caption")
LAYOUTS = ("contiguous", "chunked")
COMPRESSIONS = ("none", "gzip")
DEFAULT_CHUNK_ROWS = 16
# HDF5's chunk cache, per open file. Embedding chunks never go through it (they are read raw, once per
# batch, and served from the batch's own buffer: a cache would only copy them twice). What does go through
# it is the vlen fields' chunks of heap ids (256 rows x 16 bytes = 4 KiB each): 4 MiB keeps the index
# chunks of 256k samples, so a batch's vlen read costs no re-read of its index.
CHUNK_CACHE_BYTES = 4 << 20
CHUNK_CACHE_SLOTS = 10007  # a prime well above the chunks that fit, as HDF5 recommends

_OPEN_READERS: weakref.WeakSet[Hdf5Reader] = weakref.WeakSet()


def _close_before_fork() -> None:
    for reader in list(_OPEN_READERS):
        reader.close()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_close_before_fork)


LEGACY_VARIANT = f"-chunked{DEFAULT_CHUNK_ROWS}"  # what the files of earlier versions (no "variant" in meta) are


def variant_of(layout: str, chunk_rows: int, compression: str) -> str:
    """The materialisation's directory suffix: "-contiguous", or "-chunked<rows>[-gzip]"."""
    if layout == "contiguous":
        return "-contiguous"
    return f"-chunked{chunk_rows}" + ("" if compression == "none" else f"-{compression}")


# ---- contiguous: one memory map of the file ----


def _map_contiguous(path: Path, fields: tuple[str, ...], hint: str = "normal") -> Maps:
    """Where each dataset lies in the file (h5py, then closed) and numpy views of one map of the
    file, which carries the access hint (strategies.storage.advice)."""
    wanted = [f for f in fields if f in _EMB_DIMS] + [n for f in fields if f in _VAR for n in (f, f + "_offsets")]
    where = {}
    with h5py.File(path, "r") as f:
        for name in wanted:
            ds = f[name]
            if ds.chunks is not None or ds.compression is not None or ds.dtype.kind not in "uif":
                raise ValueError(f"{path}: dataset {name!r} is not contiguous and uncompressed")
            where[name] = (ds.id.get_offset(), ds.dtype, ds.shape)
    maps = Maps()
    mm = map_file(path, hint)
    maps.files.append(mm)
    for name, (offset, dtype, shape) in where.items():
        size = int(np.prod(shape))
        if hint != "normal" and offset is not None and not name.endswith("_offsets"):
            maps.locate(name, path, offset, 0 if name in _VAR else int(np.prod(shape[1:])) * dtype.itemsize)
        if name in _VAR:
            maps.flat[name] = mm if offset is not None else b""
            maps.arrays[name + "_base"] = np.int64(offset or 0)
        elif offset is None:  # no storage allocated: an empty dataset
            maps.arrays[name] = np.zeros(shape, dtype=dtype)
        else:
            maps.arrays[name] = np.frombuffer(mm, dtype=dtype, count=size, offset=offset).reshape(shape)
    return maps


# ---- chunked: whole chunks, read raw ----


def _open_chunked(path: Path) -> h5py.File:
    return h5py.File(path, "r", rdcc_nbytes=CHUNK_CACHE_BYTES, rdcc_nslots=CHUNK_CACHE_SLOTS)


def _read_chunks(ds: h5py.Dataset, chunk_ids: list[int], rows: int) -> np.ndarray:
    """Chunks ``chunk_ids`` of a 2-D dataset chunked (rows, dim), whole, into one buffer (k, rows,
    dim)."""
    dim = ds.shape[1]
    stack = np.empty((len(chunk_ids), rows, dim), dtype=ds.dtype)
    raw_view = stack.reshape(len(chunk_ids), -1).view(np.uint8)
    filters = ds.compression, ds.shuffle, ds.fletcher32, ds.scaleoffset
    raw_ok = filters == (None, False, False, None)
    gzip_ok = filters == ("gzip", False, False, None)
    n = ds.shape[0]
    for k, c in enumerate(chunk_ids):
        a = c * rows
        if raw_ok:
            ds.id.read_direct_chunk((a, 0), out=raw_view[k])
        elif gzip_ok:
            mask, data = ds.id.read_direct_chunk((a, 0))
            raw_view[k] = np.frombuffer(data if mask & 1 else zlib.decompress(data), dtype=np.uint8)
        else:  # another filter pipeline: let HDF5 undo it, still one whole chunk per call
            b = min(a + rows, n)
            ds.read_direct(stack[k], np.s_[a:b], np.s_[0:b - a])
    return stack


def _chunked_rows(ds: h5py.Dataset, sorted_idx: np.ndarray) -> np.ndarray:
    rows = ds.chunks[0]
    chunk_ids, which = np.unique(sorted_idx // rows, return_inverse=True)
    stack = _read_chunks(ds, chunk_ids.tolist(), rows)
    return gather_rows(stack.reshape(-1, ds.shape[1]), which * rows + sorted_idx % rows)


class Hdf5Reader(StoredBytesSidecar, Advised, PicklesUnmapped):
    """contiguous: the file's one map carries the access hint and a batch's rows are asked for
    before they are gathered; chunked: h5py reads through its own descriptor (no hint reaches it),
    the hint applies to the ``stored_bytes`` map."""

    def __init__(self, path: Path, fields: Sequence[str] = FIELDS, advice: str = "auto"):
        self.path = Path(path)
        self.fields = checked_fields(fields)
        self.advice = checked(advice)
        meta = read_meta(self.path)
        self._count = int(meta["count"])
        self.layout = meta.get("layout", "chunked")  # files of earlier versions are chunked
        file = self.path / "data.h5"
        if self.layout == "contiguous":
            self._h = LazyHandle(self._map)
        else:
            self._h = LazyHandle(functools.partial(_open_chunked, file))
        self._stored: np.ndarray | None = None

    def _map(self) -> Maps:
        return _map_contiguous(self.path / "data.h5", self.fields, self.hint)

    def __len__(self) -> int:
        return self._count

    def read_batch(self, indices: Sequence[int]) -> list[Sample]:
        idx = checked_indices(indices, self._count)
        if not idx.size:
            return []
        order, sidx = sorted_order(idx)
        if self.layout == "contiguous":
            columns = self._read_mapped(sidx, order)
        else:
            columns = self._read_chunked(idx, sidx, order)
        return build_samples(idx.tolist(), columns)

    def _read_mapped(self, sidx: np.ndarray, order: np.ndarray) -> dict[str, list]:
        maps = self._h.get()
        bases = {name: int(maps.arrays[name + "_base"]) for name in _VAR if name in self.fields}
        return mapped_columns(self.fields, maps.flat, maps.arrays, sidx, order, bases, self.hint, maps.ranges)

    def _read_chunked(self, idx: np.ndarray, sidx: np.ndarray, order: np.ndarray) -> dict[str, list]:
        f = self._h.get()
        _OPEN_READERS.add(self)
        columns: dict[str, list] = {}
        if "jpeg" in self.fields or "caption" in self.fields:
            # vlen data lives in the global heap: one fancy read per batch (h5py wants increasing unique indices)
            uniq, inverse = np.unique(idx, return_inverse=True)
            inverse = inverse.tolist()
            if "jpeg" in self.fields:
                blobs = [a.tobytes() for a in f["jpeg"][uniq]]
                columns["jpeg"] = [blobs[j] for j in inverse]
            if "caption" in self.fields:
                caps = [str(c) for c in f["caption"].asstr()[uniq]]
                columns["caption"] = [caps[j] for j in inverse]
        for name in _EMB_DIMS:
            if name in self.fields:
                columns[name] = in_request_order(list(_chunked_rows(f[name], sidx)), order)
        return columns

    def close(self) -> None:
        self._h.close()
        self._stored = None
        _OPEN_READERS.discard(self)

def _write_chunked(f: h5py.File, samples: Iterable[Sample], count: int, rows: int, compression: str,
                   stored: np.ndarray) -> None:
    gzip = {} if compression == "none" else {"compression": "gzip", "compression_opts": 4}
    ds = {
        "jpeg": f.create_dataset(
            "jpeg", shape=(0,), maxshape=(None,), chunks=(256,), dtype=h5py.vlen_dtype(np.uint8)
        ),
        "caption": f.create_dataset(
            "caption", shape=(0,), maxshape=(None,), chunks=(256,), dtype=h5py.string_dtype("utf-8")
        ),
    }
    for name, dim in _EMB_DIMS.items():
        ds[name] = f.create_dataset(
            name, shape=(0, dim), maxshape=(None, dim), chunks=(rows, dim), dtype=np.float32, **gzip
        )
    batch: list[Sample] = []

    def flush() -> None:
        if not batch:
            return
        a = batch[0].index
        b = a + len(batch)
        for d in ds.values():
            d.resize(b, axis=0)
        jpegs = np.empty(len(batch), dtype=object)
        jpegs[:] = [np.frombuffer(s.jpeg, dtype=np.uint8) for s in batch]
        if len({len(s.jpeg) for s in batch}) > 1:
            ds["jpeg"][a:b] = jpegs
        else:  # blobs of one length (the empty JPEGs of --scale full) would be taken for a 2-D array: one by one
            for k in range(len(batch)):
                ds["jpeg"][a + k] = jpegs[k]
        caps = np.empty(len(batch), dtype=object)
        caps[:] = [s.caption for s in batch]
        ds["caption"][a:b] = caps
        ds["image_emb"][a:b] = np.stack([s.image_emb for s in batch]).astype(np.float32, copy=False)
        ds["text_emb"][a:b] = np.stack([s.text_emb for s in batch]).astype(np.float32, copy=False)
        batch.clear()

    fixed = 4 * (IMAGE_EMB_DIM + TEXT_EMB_DIM)
    for i, s in in_order(samples, count):
        stored[i] = len(s.jpeg) + len(s.caption.encode("utf-8")) + fixed
        batch.append(s)
        if len(batch) >= WRITE_BATCH:
            flush()
    flush()


def _write_contiguous(f: h5py.File, samples: Iterable[Sample], count: int, path: Path,
                      stored: np.ndarray) -> None:
    """Fixed-size contiguous datasets. The flat byte buffers' sizes are known only at the end: the
    bytes are spooled to side files first (bounded memory), then copied into their datasets."""
    emb = {name: f.create_dataset(name, shape=(count, dim), dtype=np.float32) for name, dim in _EMB_DIMS.items()}
    offsets = {name: np.zeros(count + 1, dtype=np.int64) for name in _VAR}
    spool = {name: open(path / f"{name}.spool", "wb") for name in _VAR}
    try:
        pending: list[Sample] = []

        def flush() -> None:
            if pending:
                a, b = pending[0].index, pending[-1].index + 1
                emb["image_emb"][a:b] = np.stack([s.image_emb for s in pending]).astype(np.float32, copy=False)
                emb["text_emb"][a:b] = np.stack([s.text_emb for s in pending]).astype(np.float32, copy=False)
                pending.clear()

        fixed = 4 * (IMAGE_EMB_DIM + TEXT_EMB_DIM)
        for i, s in in_order(samples, count):
            data = {"jpeg": s.jpeg, "caption": s.caption.encode("utf-8")}
            for name in _VAR:
                spool[name].write(data[name])
                offsets[name][i + 1] = offsets[name][i] + len(data[name])
            stored[i] = len(data["jpeg"]) + len(data["caption"]) + fixed
            pending.append(s)
            if len(pending) >= WRITE_BATCH:
                flush()
        flush()
    finally:
        for fh in spool.values():
            fh.close()
    for name in _VAR:
        total = int(offsets[name][-1])
        flat = f.create_dataset(name, shape=(total,), dtype=np.uint8)
        with open(path / f"{name}.spool", "rb") as src:
            pos = 0
            while block := src.read(64 << 20):
                flat[pos:pos + len(block)] = np.frombuffer(block, dtype=np.uint8)
                pos += len(block)
        f.create_dataset(name + "_offsets", data=offsets[name])
        os.unlink(path / f"{name}.spool")


@register("storage", "hdf5")
class Hdf5Storage(TrackedStorage):
    name = "hdf5"

    def __init__(self, layout: str = "contiguous", chunk_rows: int | None = None, compression: str = "none",
                 advice: str = "auto"):
        self.advice = checked(advice)  # the readers' access hint (strategies.storage.advice)
        self.layout = choice("layout", layout, LAYOUTS)
        self.compression = choice("compression", compression, COMPRESSIONS)
        # Rows per embedding chunk. A random read of one row pulls a whole chunk from disk, so big chunks
        # (64 rows = 512 KiB of image_emb) inflate random-access reads; 16 keeps the chunk at 128 KiB /
        # 48 KiB while the chunk index stays small.
        self.chunk_rows = DEFAULT_CHUNK_ROWS if chunk_rows is None else integer("chunk_rows", chunk_rows, 1)
        if self.layout == "contiguous" and (chunk_rows is not None or self.compression != "none"):
            raise ValueError('chunk_rows and compression apply to layout = "chunked" only '
                             "(a contiguous dataset has no chunks and cannot be compressed)")

    @property
    def variant(self) -> str:
        """What the written files depend on besides the spec, as a directory-name suffix."""
        return variant_of(self.layout, self.chunk_rows, self.compression)

    def write(self, samples: Iterable[Sample], path: Path, count: int) -> None:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        stored = np.zeros(count, dtype=np.int64)
        with h5py.File(path / "data.h5", "w") as f:
            if self.layout == "contiguous":
                _write_contiguous(f, samples, count, path, stored)
            else:
                _write_chunked(f, samples, count, self.chunk_rows, self.compression, stored)
        np.save(path / "stored_bytes.npy", stored)
        write_meta(path, "hdf5", count, layout=self.layout, variant=self.variant)

    def open(self, path: Path, fields: Sequence[str] = FIELDS) -> Hdf5Reader:
        found = read_meta(path).get("variant", LEGACY_VARIANT)
        if found != self.variant:
            raise ValueError(f"{path} holds hdf5{found}, not the hdf5{self.variant} asked for: regenerate it "
                             f"(--regenerate), or materialise each variant under its own directory "
                             f"(<key>-hdf5{self.variant})")
        return self.track(Hdf5Reader(path, fields, self.advice), path)

    def file_names(self, path: Path) -> list[str]:
        return ["meta.json", "stored_bytes.npy", "data.h5"]
