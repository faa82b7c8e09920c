"""LMDB storage: one key per sample in one LMDB environment, read through its memory map.

Layout under ``path``::

    meta.json          {"format": "lmdb", "version": 1, "count": N}
    stored_bytes.npy   int64[N], the value bytes of each sample
    data.mdb           the environment (``lock.mdb`` beside it is the writer's and never read)

Key: the index as 8 ASCII digits (so key order is index order and neighbours share B-tree pages).
Value: a little-endian header ``uint32[4]`` = (jpeg bytes, caption bytes, image_emb floats,
text_emb floats), then the jpeg, the utf-8 caption and the two float32 vectors. A reader opens the
environment lazily in each process (one handle per process shared by its readers, see
``_EnvHandle``; readonly, ``lock=False``: nothing writes while it reads, so no reader table is
needed; ``readahead=False`` under the "random" access hint, the default: LMDB then puts MADV_RANDOM
on its map, and read-ahead would fill the page cache with neighbours; ``readahead=True`` under
"sequential" and "normal", the kernel's default read-ahead; strategies.storage.advice), reads a
batch in one read transaction with zero-copy buffers, and copies out only the requested fields.

The map size is fixed when the environment opens: it is sized from the count
(``MAP_BYTES_PER_SAMPLE`` per sample plus a margin; the file grows only with what is written) and
doubled if a write still overflows it.
"""
from __future__ import annotations

import os
import struct
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from strategies.registry import Unavailable, register
from strategies.sample import FIELDS, Sample
from strategies.storage.advice import Advised, checked
from strategies.storage.base import (
    PicklesUnmapped,
    StoredBytesSidecar,
    TrackedStorage,
    checked_fields,
    checked_indices,
    in_order,
    read_count,
    write_meta,
)

HEADER = struct.Struct("<4I")
MAP_BYTES_PER_SAMPLE = 1 << 20  # virtual address space only: a sparse file grows with the data written
MAP_MARGIN = 64 << 20
COMMIT_EVERY = 1000


def key_of(index: int) -> bytes:
    return b"%08d" % index


def encode(s: Sample) -> bytes:
    caption = s.caption.encode("utf-8")
    img = np.ascontiguousarray(s.image_emb, dtype="<f4")
    txt = np.ascontiguousarray(s.text_emb, dtype="<f4")
    return b"".join((HEADER.pack(len(s.jpeg), len(caption), img.size, txt.size), bytes(s.jpeg), caption,
                     img.tobytes(), txt.tobytes()))


# py-lmdb refuses to open one environment twice in a process (it knows it by the data file's inode, whatever
# the path), so the readers of a process share one handle per environment, counted, and closed with the last
# reader. Every handle is closed just before os.fork: the child opens its own (an inherited one would make
# the child's open fail), and the parent's readers reopen on their next read.
_ENVS: dict[tuple[int, int], list] = {}  # (st_dev, st_ino) of data.mdb -> [environment, readers using it]
_generation = 0  # bumped when every handle is closed before a fork


def _close_all() -> None:
    global _generation
    for env, _ in _ENVS.values():
        env.close()
    _ENVS.clear()
    _generation += 1


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_close_all)


class _EnvHandle:
    """One reader's use of its process's shared environment handle; picklable (opens nothing until
    used). The handle is opened with the access hint of the first reader that opens it in the
    process."""

    def __init__(self, path: str, hint: str = "random"):
        self.path = path
        self.hint = hint
        self._key: tuple[int, int] | None = None
        self._generation = -1

    def get(self):
        if self._key is None or self._generation != _generation:
            st = os.stat(os.path.join(self.path, "data.mdb"))
            key = (st.st_dev, st.st_ino)
            entry = _ENVS.get(key)
            if entry is None:
                import lmdb  # here, not at module import: the registry imports every storage

                env = lmdb.open(self.path, readonly=True, lock=False, readahead=self.hint != "random",
                                meminit=False)
                entry = _ENVS[key] = [env, 0]
            entry[1] += 1
            self._key, self._generation = key, _generation
        return _ENVS[self._key][0]

    def close(self) -> None:
        key, self._key = self._key, None
        if key is None or self._generation != _generation:
            return  # never opened, or already closed before a fork
        entry = _ENVS.get(key)
        if entry is not None:
            entry[1] -= 1
            if entry[1] <= 0:
                entry[0].close()
                del _ENVS[key]

    def __getstate__(self):
        return {"path": self.path, "hint": self.hint, "_key": None, "_generation": -1}


class LmdbReader(StoredBytesSidecar, Advised, PicklesUnmapped):
    def __init__(self, path: Path, fields: Sequence[str] = FIELDS, advice: str = "auto"):
        self.path = Path(path)
        self.fields = checked_fields(fields)
        self.advice = checked(advice)
        self._count = read_count(self.path)
        self._env = _EnvHandle(str(self.path), self.hint)
        self._stored: np.ndarray | None = None  # memory-mapped on first use; not pickled

    def __len__(self) -> int:
        return self._count

    def read_batch(self, indices: Sequence[int]) -> list[Sample]:
        idx = checked_indices(indices, self._count)
        out = [Sample(index=int(i)) for i in idx]
        if not idx.size:
            return out
        want = self.fields
        with self._env.get().begin(buffers=True) as txn:
            for s in out:
                value = txn.get(key_of(s.index))
                if value is None:
                    raise KeyError(f"{self.path}: sample {s.index} is missing from the LMDB environment")
                n_jpeg, n_cap, n_img, n_txt = HEADER.unpack_from(value, 0)
                a = HEADER.size
                b = a + n_jpeg
                c = b + n_cap
                d = c + 4 * n_img
                e = d + 4 * n_txt
                if "jpeg" in want:
                    s.jpeg = bytes(value[a:b])
                if "caption" in want:
                    s.caption = bytes(value[b:c]).decode("utf-8")
                if "image_emb" in want:
                    s.image_emb = np.frombuffer(value[c:d], dtype="<f4").astype(np.float32)
                if "text_emb" in want:
                    s.text_emb = np.frombuffer(value[d:e], dtype="<f4").astype(np.float32)
        return out

    def close(self) -> None:
        self._env.close()
        self._env.hint = self.hint  # the next open follows an advise() made since
        self._stored = None


INSTALL = "the lmdb storage needs the lmdb package: pip install lmdb"


def _require_lmdb() -> None:
    """Unavailable (one line, at scenario load) when lmdb does not import; lmdb itself is imported
    only where the storage writes or reads: the registry imports every storage module at
    start-up."""
    try:
        import lmdb  # noqa: F401
    except ImportError:
        raise Unavailable(INSTALL) from None


@register("storage", "lmdb")
class LmdbStorage(TrackedStorage):
    """``advice``: the access hint its readers give the kernel (strategies.storage.advice)."""

    name = "lmdb"

    def __init__(self, advice: str = "auto"):
        _require_lmdb()
        self.advice = checked(advice)

    def write(self, samples: Iterable[Sample], path: Path, count: int) -> None:
        import lmdb

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        stored = np.zeros(count, dtype=np.int64)
        map_size = count * MAP_BYTES_PER_SAMPLE + MAP_MARGIN
        env = lmdb.open(str(path), map_size=map_size, subdir=True, meminit=False, sync=False, metasync=False)
        try:
            pending: list[tuple[bytes, bytes]] = []

            def commit() -> None:
                nonlocal map_size
                while True:
                    try:
                        with env.begin(write=True) as txn:
                            for k, v in pending:
                                txn.put(k, v, append=True)  # keys arrive in order: append to the B-tree
                        break
                    except lmdb.MapFullError:  # a transaction that failed is aborted: grow and redo it
                        map_size *= 2
                        env.set_mapsize(map_size)
                pending.clear()

            for i, s in in_order(samples, count):
                value = encode(s)
                stored[i] = len(value)
                pending.append((key_of(i), value))
                if len(pending) >= COMMIT_EVERY:
                    commit()
            commit()
            env.sync(True)
        finally:
            env.close()
        np.save(path / "stored_bytes.npy", stored)
        write_meta(path, "lmdb", count)

    def open(self, path: Path, fields: Sequence[str] = FIELDS) -> LmdbReader:
        return self.track(LmdbReader(path, fields, self.advice), path)

    def file_names(self, path: Path) -> list[str]:
        return ["meta.json", "stored_bytes.npy", "data.mdb"]
