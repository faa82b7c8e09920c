"""Memory-mapped storage: flat numpy buffers read through ``np.load(mmap_mode="r")``.

Layout under ``path``::

    meta.json                          {"format": "mmap", "version": 1, "count": N}
    jpeg.bin, jpeg_offsets.npy         uint8 flat buffer, int64[N+1] offsets
    caption.bin, caption_offsets.npy   utf-8 flat buffer, int64[N+1] offsets
    image_emb.npy, text_emb.npy        float32[N, 2048], float32[N, 768]
    stored_bytes.npy                   int64[N], bytes each sample occupies (absent in
                                       older materialisations)
"""
from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from strategies.registry import register
from strategies.sample import FIELDS, IMAGE_EMB_DIM, TEXT_EMB_DIM, Sample
from strategies.storage.advice import Advised, checked
from strategies.storage.base import (
    LazyHandle,
    Maps,
    PicklesUnmapped,
    TrackedStorage,
    build_samples,
    checked_fields,
    checked_indices,
    in_order,
    load_mapped,
    map_file,
    mapped_columns,
    read_count,
    sorted_order,
    write_meta,
)

_EMB_DIMS = {"image_emb": IMAGE_EMB_DIM, "text_emb": TEXT_EMB_DIM}
_VAR = ("jpeg", "caption")


class MmapReader(Advised, PicklesUnmapped):
    """Reads a batch with one sorted fancy index per embedding array (into one buffer per batch and
    field) and one slice per sample of each flat byte buffer. Offsets and stored bytes stay
    memory-mapped, so the reader's memory does not grow with the dataset. Every map carries the
    reader's access hint, and a batch's rows are asked for before they are gathered
    (strategies.storage.advice)."""

    def __init__(self, path: Path, fields: Sequence[str] = FIELDS, advice: str = "auto"):
        self.path = Path(path)
        self.fields = checked_fields(fields)
        self.advice = checked(advice)
        self._count = read_count(self.path)
        self._maps = LazyHandle(self._open_maps)
        self._stored: np.ndarray | None = None

    def _open_maps(self) -> Maps:
        maps, hint = Maps(), self.hint
        for name in _VAR:
            if name in self.fields:
                flat = map_file(self.path / f"{name}.bin", hint)
                maps.files.append(flat)
                maps.flat[name] = flat
                if hint != "normal":
                    maps.locate(name, self.path / f"{name}.bin", 0)
                maps.arrays[name + "_offsets"] = load_mapped(self.path / f"{name}_offsets.npy", hint)
        for name in _EMB_DIMS:
            if name in self.fields:
                maps.arrays[name] = load_mapped(self.path / f"{name}.npy", hint, maps, name)
        return maps

    def __len__(self) -> int:
        return self._count

    def read_batch(self, indices: Sequence[int]) -> list[Sample]:
        idx = checked_indices(indices, self._count)
        if not idx.size:
            return []
        maps = self._maps.get()
        order, sidx = sorted_order(idx)
        columns = mapped_columns(self.fields, maps.flat, maps.arrays, sidx, order, hint=self.hint,
                                 ranges=maps.ranges)
        return build_samples(idx.tolist(), columns)

    def stored_bytes(self) -> np.ndarray:
        """Memory-mapped int64[N] (computed in memory for a materialisation written before the
        sidecar)."""
        if self._stored is None:
            sidecar = self.path / "stored_bytes.npy"
            if sidecar.exists():
                self._stored = load_mapped(sidecar, self.hint)
            else:
                fixed = 4 * (IMAGE_EMB_DIM + TEXT_EMB_DIM)
                total = np.full(self._count, fixed, dtype=np.int64)
                for name in _VAR:
                    total += np.diff(load_mapped(self.path / f"{name}_offsets.npy"))
                self._stored = total
        return self._stored

    def close(self) -> None:
        self._maps.close()
        self._stored = None

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
class MmapStorage(TrackedStorage):
    """``advice``: the access hint its readers give the kernel (strategies.storage.advice: auto,
    random, sequential, normal = the kernel's defaults)."""

    name = "mmap"
    variant = ""  # what the written files depend on besides the spec: nothing (the advice is a reader's)

    def __init__(self, advice: str = "auto"):
        self.advice = checked(advice)

    def write(self, samples: Iterable[Sample], path: Path, count: int) -> None:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        flat = {name: _FlatWriter(path / f"{name}.bin", count) for name in _VAR}
        embs = {
            name: np.lib.format.open_memmap(path / f"{name}.npy", mode="w+", dtype=np.float32, shape=(count, dim))
            for name, dim in _EMB_DIMS.items()
        }
        for name in _EMB_DIMS:  # the blocks reserved now: a full disk is OSError 28 here, not SIGBUS on a store
            with open(path / f"{name}.npy", "r+b") as f:
                os.posix_fallocate(f.fileno(), 0, os.fstat(f.fileno()).st_size)
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
        stored = np.full(count, 4 * (IMAGE_EMB_DIM + TEXT_EMB_DIM), dtype=np.int64)
        for name, w in flat.items():
            np.save(path / f"{name}_offsets.npy", w.offsets)
            stored += np.diff(w.offsets)
        np.save(path / "stored_bytes.npy", stored)
        write_meta(path, "mmap", count)

    def open(self, path: Path, fields: Sequence[str] = FIELDS) -> MmapReader:
        return self.track(MmapReader(path, fields, self.advice), path)

    def file_names(self, path: Path) -> list[str]:
        names = ["meta.json"]
        for name in _VAR:
            names += [f"{name}.bin", f"{name}_offsets.npy"]
        names += [f"{name}.npy" for name in _EMB_DIMS]
        if (Path(path) / "stored_bytes.npy").exists():  # older materialisations lack it
            names.append("stored_bytes.npy")
        return names
