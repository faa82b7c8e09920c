"""Raw storage: one file per sample per field, read with plain open()/read (the naive baseline).

Layout under ``path``::

    meta.json                      {"format": "raw", "version": 1, "count": N}
    stored_bytes.npy               int64[N], bytes each sample occupies on disk
    <index // 1000:05d>/<index:08d>.jpg | .txt (utf-8) | .img.f32 | .txt.f32 (raw float32)
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from strategies.registry import register
from strategies.sample import FIELDS, Sample
from strategies.storage.base import checked_fields, in_order, read_count, write_meta

SHARD = 1000
_SUFFIX = {"jpeg": ".jpg", "caption": ".txt", "image_emb": ".img.f32", "text_emb": ".txt.f32"}


def _sample_path(root: Path, index: int, field: str) -> Path:
    return root / f"{index // SHARD:05d}" / f"{index:08d}{_SUFFIX[field]}"


def _read_bytes(p: Path) -> bytes:
    with open(p, "rb") as f:
        return f.read()


class RawReader:
    def __init__(self, path: Path, fields: Sequence[str] = FIELDS):
        self.path = Path(path)
        self.fields = checked_fields(fields)
        self._count = read_count(self.path)
        self._stored: list[int] | None = None

    def __len__(self) -> int:
        return self._count

    def _read_one(self, index: int) -> Sample:
        if not 0 <= index < self._count:
            raise IndexError(f"sample {index} out of range for {self._count} samples")
        s = Sample(index=index)
        for field in self.fields:
            data = _read_bytes(_sample_path(self.path, index, field))
            if field == "jpeg":
                s.jpeg = data
            elif field == "caption":
                s.caption = data.decode("utf-8")
            else:
                setattr(s, field, np.frombuffer(data, dtype=np.float32).copy())
        return s

    def read_batch(self, indices: Sequence[int]) -> list[Sample]:
        return [self._read_one(int(i)) for i in indices]

    def stored_bytes(self) -> list[int]:
        if self._stored is None:
            self._stored = np.load(self.path / "stored_bytes.npy").tolist()
        return self._stored

    def close(self) -> None:
        pass


@register("storage", "raw")
class RawStorage:
    name = "raw"

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
        return RawReader(path, fields)

    def files(self, path: Path) -> list[Path]:
        path = Path(path)
        out = []
        for root, dirs, names in os.walk(path):
            dirs.sort()
            out.extend(Path(root) / n for n in sorted(names))
        return out
