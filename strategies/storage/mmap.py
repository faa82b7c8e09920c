"""Memory-mapped storage: flat numpy buffers read through ``np.load(mmap_mode="r")``.

Layout under ``path``::

    meta.json                          {"format": "mmap", "version": 1, "count": N}
    jpeg.bin, jpeg_offsets.npy         uint8 flat buffer, int64[N+1] offsets
    caption.bin, caption_offsets.npy   utf-8 flat buffer, int64[N+1] offsets
    image_emb.npy, text_emb.npy        float32[N, 2048], float32[N, 768]
"""
from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from strategies.registry import register
from strategies.sample import FIELDS, IMAGE_EMB_DIM, TEXT_EMB_DIM, Sample
from strategies.storage.base import LazyHandle, checked_fields, checked_indices, in_order, read_count, write_meta

_EMB_DIMS = {"image_emb": IMAGE_EMB_DIM, "text_emb": TEXT_EMB_DIM}
_VAR = ("jpeg", "caption")


def _open_flat(path: str) -> np.ndarray:
    # np.memmap refuses an empty file; an empty buffer needs no mapping.
    if os.path.getsize(path) == 0:
        return np.zeros(0, dtype=np.uint8)
    return np.memmap(path, dtype=np.uint8, mode="r")


class MmapReader:
    def __init__(self, path: Path, fields: Sequence[str] = FIELDS):
        self.path = Path(path)
        self.fields = checked_fields(fields)
        self._count = read_count(self.path)
        self._h: dict[str, LazyHandle] = {}
        for name in _VAR:
            self._h[name] = LazyHandle(functools.partial(_open_flat, str(self.path / f"{name}.bin")))
            self._h[name + "_offsets"] = LazyHandle(
                functools.partial(np.load, str(self.path / f"{name}_offsets.npy"), mmap_mode="r")
            )
        for name in _EMB_DIMS:
            self._h[name] = LazyHandle(functools.partial(np.load, str(self.path / f"{name}.npy"), mmap_mode="r"))
        self._stored: list[int] | None = None

    def __len__(self) -> int:
        return self._count

    def read_batch(self, indices: Sequence[int]) -> list[Sample]:
        idx = checked_indices(indices, self._count)
        out = [Sample(index=int(i)) for i in idx]
        for name in _VAR:
            if name not in self.fields:
                continue
            buf = self._h[name].get()
            offs = self._h[name + "_offsets"].get()
            starts = offs[idx]
            ends = offs[idx + 1]
            for s, a, b in zip(out, starts.tolist(), ends.tolist()):
                data = buf[a:b].tobytes()
                if name == "jpeg":
                    s.jpeg = data
                else:
                    s.caption = data.decode("utf-8")
        for name in _EMB_DIMS:
            if name not in self.fields:
                continue
            rows = self._h[name].get()[idx]  # one fancy-indexed read, an owned copy
            for s, row in zip(out, rows):
                setattr(s, name, row.copy())  # own each row so caches don't pin the batch
        return out

    def stored_bytes(self) -> list[int]:
        if self._stored is None:
            fixed = 4 * (IMAGE_EMB_DIM + TEXT_EMB_DIM)
            total = np.full(self._count, fixed, dtype=np.int64)
            for name in _VAR:
                offs = np.load(self.path / f"{name}_offsets.npy")
                total += np.diff(offs)
            self._stored = total.tolist()
        return self._stored

    def close(self) -> None:
        for h in self._h.values():
            h.close()


class _FlatWriter:
    def __init__(self, path: Path, count: int):
        self.f = open(path, "wb")
        self.offsets = np.zeros(count + 1, dtype=np.int64)
        self.pos = 0

    def add(self, i: int, data: bytes) -> None:
        self.f.write(data)
        self.pos += len(data)
        self.offsets[i + 1] = self.pos


@register("storage", "mmap")
class MmapStorage:
    name = "mmap"

    def write(self, samples: Iterable[Sample], path: Path, count: int) -> None:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        flat = {name: _FlatWriter(path / f"{name}.bin", count) for name in _VAR}
        embs = {
            name: np.lib.format.open_memmap(path / f"{name}.npy", mode="w+", dtype=np.float32, shape=(count, dim))
            for name, dim in _EMB_DIMS.items()
        }
        try:
            for i, s in in_order(samples, count):
                flat["jpeg"].add(i, s.jpeg)
                flat["caption"].add(i, s.caption.encode("utf-8"))
                embs["image_emb"][i] = s.image_emb
                embs["text_emb"][i] = s.text_emb
                if (i + 1) % 4096 == 0:
                    for m in embs.values():
                        m.flush()
        finally:
            for w in flat.values():
                w.f.close()
            for m in embs.values():
                m.flush()
            del embs
        for name, w in flat.items():
            np.save(path / f"{name}_offsets.npy", w.offsets)
        write_meta(path, "mmap", count)

    def open(self, path: Path, fields: Sequence[str] = FIELDS) -> MmapReader:
        return MmapReader(path, fields)

    def files(self, path: Path) -> list[Path]:
        path = Path(path)
        names = ["meta.json"]
        for name in _VAR:
            names += [f"{name}.bin", f"{name}_offsets.npy"]
        names += [f"{name}.npy" for name in _EMB_DIMS]
        return [path / n for n in names]
