"""WebDataset storage: POSIX tar shards written with the ``webdataset`` package, read at random
through an index of member offsets (what webdataset's indexed readers do), so every sampler works
on it.

Layout under ``path``::

    meta.json                {"format": "webdataset", "version": 1, "count": N}
    shards.json              {"shard_size": S, "shards": ["shard-00000.tar", ...]}
    shard-00000.tar ...      shard k holds samples [k*S, (k+1)*S), in index order; per sample the
                             members <key>.jpg, <key>.txt (utf-8), <key>.image_emb.npy,
                             <key>.text_emb.npy (key = the index as 8 digits; webdataset writes a
                             sample's members sorted)
    index.npy                int64[N, 9]: shard number, then (offset, length) of jpg, txt,
                             image_emb and text_emb in that shard's tar; for .npy members the
                             offset and length of the float32 payload after the .npy header. Built
                             at write time by reading each finished shard's tar headers; read
                             memory-mapped
    stored_bytes.npy         int64[N]: the sample's bytes in the tar (member headers and padding
                             included)

A reader opens the index memory-mapped and each shard with ``os.open`` lazily, once per process
(after a fork the child opens its own descriptors), and reads a sample's members with ``os.pread``:
requested members closer than ``COALESCE_GAP`` bytes are fetched in one call.
"""
from __future__ import annotations

import io
import json
import os
import tarfile
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from strategies.params import integer
from strategies.registry import Unavailable, register
from strategies.sample import FIELDS, IMAGE_EMB_DIM, TEXT_EMB_DIM, Sample
from strategies.storage.advice import (
    MERGE_GAP,
    Advised,
    advise_fd,
    checked,
    fd_will_need,
    merged,
)
from strategies.storage.base import (
    LazyHandle,
    Maps,
    PicklesUnmapped,
    StoredBytesSidecar,
    TrackedStorage,
    checked_fields,
    checked_indices,
    in_order,
    load_mapped,
    read_count,
    write_meta,
)

# member extension of each sample field, in FIELDS order (the column pairs of index.npy)
MEMBERS = {"jpeg": "jpg", "caption": "txt", "image_emb": "image_emb.npy", "text_emb": "text_emb.npy"}
_EMB_DIMS = {"image_emb": IMAGE_EMB_DIM, "text_emb": TEXT_EMB_DIM}
COALESCE_GAP = 8192  # read two members of a sample in one pread when at most this many bytes lie between
TAR_BLOCK = 512


def shard_name(k: int) -> str:
    return f"shard-{k:05d}.tar"


def _npy_payload(data: bytes, member: str) -> tuple[int, int]:
    """(offset, length) of the float32 payload inside an .npy member, checked to be little-endian
    1-D f4."""
    buf = io.BytesIO(data)
    version = np.lib.format.read_magic(buf)
    read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    shape, _, dtype = read_header(buf)
    if dtype != np.dtype("<f4") or len(shape) != 1:
        raise ValueError(f"{member}: expected a 1-D little-endian float32 array, got {dtype} {shape}")
    start = buf.tell()
    return start, len(data) - start


def _index_shard(tar_path: Path, first: int, count: int, k: int, index: np.ndarray, stored: np.ndarray) -> None:
    """Fill rows [first, first+count) of the index from the finished shard's tar headers."""
    want = {f"{i:08d}": i for i in range(first, first + count)}
    column = {ext: c for c, ext in enumerate(MEMBERS.values())}
    seen = np.zeros((count, len(MEMBERS)), dtype=bool)
    with open(tar_path, "rb") as raw, tarfile.open(fileobj=raw, mode="r:") as tar:
        for m in tar:
            key, _, ext = m.name.partition(".")
            i = want.get(key)
            if i is None or ext not in column or not m.isfile():
                raise ValueError(f"{tar_path.name}: unexpected member {m.name}")
            c = column[ext]
            offset, length = m.offset_data, m.size
            if ext.endswith(".npy"):
                raw.seek(m.offset_data)
                head = raw.read(min(m.size, 4096))
                skip, _ = _npy_payload(head, m.name)
                offset, length = offset + skip, m.size - skip
            index[i, 0] = k
            index[i, 1 + 2 * c] = offset
            index[i, 2 + 2 * c] = length
            stored[i] += TAR_BLOCK + -(-m.size // TAR_BLOCK) * TAR_BLOCK
            seen[i - first, c] = True
    if not seen.all():
        r, c = np.argwhere(~seen)[0]
        raise ValueError(f"{tar_path.name}: sample {first + r} lacks its {list(MEMBERS.values())[c]} member")


class _Descriptors:
    """The shard files of one reader in one process, opened on first use (their names read from
    shards.json here, in the reading process: a pickled reader does not carry a list that grows
    with the dataset)."""

    def __init__(self, root: str, hint: str = "normal"):
        self.root = root
        self.hint = hint
        self.names: list[str] = list(_read_shards_json(root)["shards"])
        self.fds: dict[int, int] = {}

    def fd(self, shard: int) -> int:
        fd = self.fds.get(shard)
        if fd is None:
            fd = self.fds[shard] = os.open(os.path.join(self.root, self.names[shard]), os.O_RDONLY)
            advise_fd(fd, self.hint)
        return fd

    def close(self) -> None:
        fds, self.fds = self.fds, {}
        for fd in fds.values():
            os.close(fd)


def _read_shards_json(path: Path) -> dict:
    with open(Path(path) / "shards.json") as f:
        return json.load(f)


class WebDatasetReader(StoredBytesSidecar, Advised, PicklesUnmapped):
    """Every shard descriptor and the index map carry the access hint; under any hint but "normal"
    the byte ranges a batch reads are asked for (POSIX_FADV_WILLNEED, per shard) before the first
    pread."""

    def __init__(self, path: Path, fields: Sequence[str] = FIELDS, advice: str = "auto"):
        self.path = Path(path)
        self.fields = checked_fields(fields)
        self.advice = checked(advice)
        self._count = read_count(self.path)
        layout = _read_shards_json(self.path)
        self.shard_size = int(layout["shard_size"])
        self._index = LazyHandle(self._map_index)
        self._fds = LazyHandle(self._descriptors)
        self._columns = [c for c, f in enumerate(FIELDS) if f in self.fields]
        self._stored: np.ndarray | None = None  # memory-mapped on first use; not pickled

    def _map_index(self) -> Maps:
        maps = Maps()
        maps.arrays["index"] = load_mapped(self.path / "index.npy", self.hint, maps, "index")
        return maps

    def _descriptors(self) -> _Descriptors:
        return _Descriptors(str(self.path), self.hint)

    def __len__(self) -> int:
        return self._count

    def _groups(self, row: list[int]) -> list[list[tuple[int, int, int]]]:
        """A sample's requested members as (offset, length, column), those close together in one
        group."""
        spans = sorted((row[1 + 2 * c], row[2 + 2 * c], c) for c in self._columns)
        groups: list[list[tuple[int, int, int]]] = [[spans[0]]]
        for span in spans[1:]:
            last = groups[-1][-1]
            if span[0] - (last[0] + last[1]) <= COALESCE_GAP:
                groups[-1].append(span)
            else:
                groups.append([span])
        return groups

    def _will_need(self, fds: _Descriptors, plan: list) -> None:
        """Every byte range of the batch asked for first, per shard (merged like advice.merged)."""
        by_shard: dict[int, list[tuple[int, int]]] = {}
        for shard, groups in plan:
            by_shard.setdefault(shard, []).extend((g[0][0], g[-1][0] + g[-1][1]) for g in groups)
        for shard, ranges in by_shard.items():
            fd_will_need(fds.fd(shard), merged(ranges, MERGE_GAP[self.hint]))

    def read_batch(self, indices: Sequence[int]) -> list[Sample]:
        idx = checked_indices(indices, self._count)
        out = [Sample(index=int(i)) for i in idx]
        if not idx.size or not self._columns:
            return out
        index = self._index.get()
        if "index" in index.ranges:  # the batch's index rows asked for first
            ranges, offset, row_bytes = index.ranges["index"]
            ranges.rows(offset, row_bytes, np.sort(idx), self.hint)
        rows = np.asarray(index.arrays["index"][idx])  # one fancy read of the batch's index rows
        fds = self._fds.get()
        plan = [(row[0], self._groups(row)) for row in rows.tolist()]
        if self.hint != "normal":
            self._will_need(fds, plan)
        for s, (shard, groups) in zip(out, plan):
            fd = fds.fd(shard)
            for group in groups:
                start = group[0][0]
                end = group[-1][0] + group[-1][1]
                data = os.pread(fd, end - start, start)
                if len(data) != end - start:
                    raise OSError(f"{self.path / fds.names[shard]}: short read at offset {start}")
                for offset, length, c in group:
                    set_field(s, FIELDS[c], data[offset - start:offset - start + length])
        return out

    def shards(self) -> list[range]:
        return fixed_shards(self._count, self.shard_size)

    def close(self) -> None:
        self._fds.close()
        self._index.close()
        self._stored = None


def fixed_shards(count: int, shard_size: int) -> list[range]:
    """Contiguous index ranges of ``shard_size`` (the last one may be shorter) covering
    0..count-1."""
    return [range(a, min(a + shard_size, count)) for a in range(0, count, shard_size)]


def set_field(s: Sample, field: str, piece: bytes) -> None:
    """One member's bytes into its sample's field (a JPEG as bytes, a caption as text, an embedding
    as float32)."""
    if field == "jpeg":
        s.jpeg = piece
    elif field == "caption":
        s.caption = piece.decode("utf-8")
    else:
        setattr(s, field, np.frombuffer(piece, dtype="<f4").astype(np.float32))


INSTALL = "the webdataset storage needs the webdataset package (and its braceexpand): pip install webdataset"


def _require_webdataset() -> None:
    """Unavailable (one line, at scenario load) when webdataset does not import. Imported only here
    and in write, when the storage is selected: the registry imports every storage module at
    start-up, and the GPU image has no webdataset."""
    try:
        import webdataset  # noqa: F401
    except ImportError:
        raise Unavailable(INSTALL) from None


@register("storage", "webdataset")
class WebDatasetStorage(TrackedStorage):
    """``shard_size``: samples per tar shard. Real datasets use 1k-10k (100 MB-1 GB shards); the
    default suits the harness's datasets of a few thousand samples and equals the ``shards``
    sampler's default."""

    name = "webdataset"

    def __init__(self, shard_size: int = 64, advice: str = "auto"):
        _require_webdataset()
        self.shard_size = integer("shard_size", shard_size, 1)
        self.advice = checked(advice)  # the readers' access hint (strategies.storage.advice)

    @property
    def variant(self) -> str:
        """What the written files depend on besides the spec, as a directory-name suffix."""
        return f"-shard{self.shard_size}"

    def write(self, samples: Iterable[Sample], path: Path, count: int) -> None:
        import webdataset as wds  # here, not at module import: the registry imports every storage at start-up

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        index = np.zeros((count, 1 + 2 * len(MEMBERS)), dtype=np.int64)
        stored = np.zeros(count, dtype=np.int64)
        names: list[str] = []
        writer, first, k = None, 0, -1

        def finish() -> None:
            writer.close()
            _index_shard(path / names[k], first, n_in_shard, k, index, stored)

        n_in_shard = 0
        try:
            for i, s in in_order(samples, count):
                if i % self.shard_size == 0:
                    if writer is not None:
                        finish()
                    k, first, n_in_shard = k + 1, i, 0
                    names.append(shard_name(k))
                    writer = wds.TarWriter(str(path / names[k]), mtime=0)  # fixed mtime: same bytes each time
                writer.write({
                    "__key__": f"{i:08d}",
                    "jpg": bytes(s.jpeg),
                    "txt": s.caption,
                    "image_emb.npy": np.ascontiguousarray(s.image_emb, dtype="<f4"),
                    "text_emb.npy": np.ascontiguousarray(s.text_emb, dtype="<f4"),
                })
                n_in_shard += 1
            if writer is not None:
                finish()
                writer = None
        finally:
            if writer is not None:
                writer.close()
        np.save(path / "index.npy", index)
        np.save(path / "stored_bytes.npy", stored)
        with open(path / "shards.json", "w") as f:
            json.dump({"shard_size": self.shard_size, "shards": names}, f)
        write_meta(path, "webdataset", count)

    def open(self, path: Path, fields: Sequence[str] = FIELDS) -> WebDatasetReader:
        return self.track(WebDatasetReader(path, fields, self.advice), path)

    def shard_ranges(self, path: Path) -> list[range]:
        """The index range of every tar shard, in order (what a shard-streaming sampler should
        follow)."""
        return fixed_shards(read_count(path), int(_read_shards_json(path)["shard_size"]))

    def file_names(self, path: Path) -> list[str]:
        return ["meta.json", "shards.json", "index.npy", "stored_bytes.npy"] + list(_read_shards_json(path)["shards"])
