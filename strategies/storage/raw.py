"""Raw storage: one file per sample per field (the naive baseline's layout), read with the fewest
syscalls.

Layout under ``path``::

    meta.json                      {"format": "raw", "version": 1, "count": N}
    stored_bytes.npy               int64[N], bytes each sample occupies on disk
    <index // 1000:05d>/<index:08d>.jpg | .txt (utf-8) | .img.f32 | .txt.f32 (raw float32)

Each file is read with exactly ``open``, one ``read`` and ``close`` (no ``fstat``, no tty check, no
second read to find the end of the file): a path relative to a directory descriptor of the dataset,
the embeddings read (``readv``) straight into one buffer per batch and field, the variable-length
fields read with an upper bound on their size (the sample's stored bytes, memory-mapped), so one
read returns the whole file.
"""
from __future__ import annotations

import functools
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from strategies.registry import register
from strategies.sample import FIELDS, IMAGE_EMB_DIM, TEXT_EMB_DIM, Sample
from strategies.storage.advice import Advised, advise_fd, checked
from strategies.storage.base import (
    LazyHandle,
    PicklesUnmapped,
    StoredBytesSidecar,
    TrackedStorage,
    build_samples,
    checked_fields,
    checked_indices,
    in_order,
    in_request_order,
    read_count,
    sorted_order,
    write_meta,
)

SHARD = 1000
_SUFFIX = {"jpeg": ".jpg", "caption": ".txt", "image_emb": ".img.f32", "text_emb": ".txt.f32"}
_EMB_DIMS = {"image_emb": IMAGE_EMB_DIM, "text_emb": TEXT_EMB_DIM}
_FLAGS = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)


def _sample_path(root: Path, index: int, field: str) -> Path:
    return root / f"{index // SHARD:05d}" / f"{index:08d}{_SUFFIX[field]}"


def _rel_stem(index: int) -> str:
    return f"{index // SHARD:05d}/{index:08d}"


class _Dir:
    """A directory descriptor of the dataset (paths resolve relative to it: no walk of the absolute
    path)."""

    def __init__(self, path: Path):
        self.fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class RawReader(StoredBytesSidecar, Advised, PicklesUnmapped):
    """Each file is read whole in one call, so read-ahead cannot read past it; the access hint
    still goes on every descriptor (one ``posix_fadvise`` per file, none under "normal") and on the
    ``stored_bytes`` map."""

    def __init__(self, path: Path, fields: Sequence[str] = FIELDS, advice: str = "auto"):
        self.path = Path(path)
        self.fields = checked_fields(fields)
        self.advice = checked(advice)
        self._count = read_count(self.path)
        self._dir = LazyHandle(functools.partial(_Dir, self.path))
        self._stored: np.ndarray | None = None

    def __len__(self) -> int:
        return self._count

    def _read_into(self, dir_fd: int, stems: list[str], field: str, out: np.ndarray) -> None:
        """Each sample's file of a fixed-size field read into its row of ``out`` (one readv per
        file)."""
        suffix = _SUFFIX[field]
        want = out.shape[1] * out.itemsize
        hint = self.hint
        for stem, row in zip(stems, out):
            fd = os.open(stem + suffix, _FLAGS, dir_fd=dir_fd)
            try:
                advise_fd(fd, hint)
                n = os.readv(fd, [row])
            finally:
                os.close(fd)
            if n != want:
                raise ValueError(f"{self.path / (stem + suffix)}: {n} bytes, expected {want}")

    def _read_whole(self, dir_fd: int, stems: list[str], field: str, bounds: list[int]) -> list[bytes]:
        """Each sample's file of a variable-size field, one read of at most its bound (> the file's
        size)."""
        suffix = _SUFFIX[field]
        out, hint = [], self.hint
        for stem, bound in zip(stems, bounds):
            fd = os.open(stem + suffix, _FLAGS, dir_fd=dir_fd)
            try:
                advise_fd(fd, hint)
                data = os.read(fd, bound)
                if len(data) == bound:  # the bound was not above the size: finish the file
                    rest = [data]
                    while chunk := os.read(fd, 1 << 20):
                        rest.append(chunk)
                    data = b"".join(rest)
            finally:
                os.close(fd)
            out.append(data)
        return out

    def read_batch(self, indices: Sequence[int]) -> list[Sample]:
        idx = checked_indices(indices, self._count)
        if not idx.size:
            return []
        dir_fd = self._dir.get().fd
        order, sidx = sorted_order(idx)
        stems = [_rel_stem(i) for i in sidx.tolist()]
        columns: dict[str, list] = {}
        if "jpeg" in self.fields or "caption" in self.fields:
            bounds = (self.stored_bytes()[sidx] + 1).tolist()
            for field in ("jpeg", "caption"):
                if field in self.fields:
                    got = self._read_whole(dir_fd, stems, field, bounds)
                    if field == "caption":
                        got = [b.decode("utf-8") for b in got]
                    columns[field] = in_request_order(got, order)
        for field, dim in _EMB_DIMS.items():
            if field in self.fields:
                buf = np.empty((len(sidx), dim), dtype=np.float32)
                self._read_into(dir_fd, stems, field, buf)
                columns[field] = in_request_order(list(buf), order)
        return build_samples(idx.tolist(), columns)

    def close(self) -> None:
        self._dir.close()
        self._stored = None


@register("storage", "raw")
class RawStorage(TrackedStorage):
    """``advice``: the access hint its readers give the kernel (strategies.storage.advice)."""

    name = "raw"
    variant = ""  # what the written files depend on besides the spec: nothing (the advice is a reader's)

    def __init__(self, advice: str = "auto"):
        self.advice = checked(advice)

    def write(self, samples: Iterable[Sample], path: Path, count: int) -> None:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        stored = np.zeros(count, dtype=np.int64)
        for i, s in in_order(samples, count):
            if i % SHARD == 0:
                (path / f"{i // SHARD:05d}").mkdir(exist_ok=True)
            payload = {
                "jpeg": s.jpeg,
                "caption": s.caption.encode("utf-8"),
                "image_emb": np.ascontiguousarray(s.image_emb, dtype=np.float32).tobytes(),
                "text_emb": np.ascontiguousarray(s.text_emb, dtype=np.float32).tobytes(),
            }
            for field, data in payload.items():
                with open(_sample_path(path, i, field), "wb") as f:
                    f.write(data)
                stored[i] += len(data)
        np.save(path / "stored_bytes.npy", stored)
        write_meta(path, "raw", count)

    def open(self, path: Path, fields: Sequence[str] = FIELDS) -> RawReader:
        return self.track(RawReader(path, fields, self.advice), path)

    def file_names(self, path: Path) -> list[str]:
        out = []
        for root, dirs, names in os.walk(path):
            dirs.sort()
            out.extend(os.path.relpath(os.path.join(root, n), path) for n in sorted(names))
        return out
