"""A size-bounded LRU disk cache tier for remote objects and byte ranges (shards, row-group ranges,
raw objects), as LitData and Streaming keep one: a cache directory shared by every process that
opens it (a rank's DataLoader workers, the ranks of a node), one file per cached entry.

``DiskTier(directory, capacity_bytes).fetch(key, load)`` returns the entry's bytes from its file (a
hit: its mtime is set to now, so the least recently used entry is the oldest mtime) or calls
``load()`` (a miss), writes the result to a temporary file in the directory and renames it into
place (a reader never sees half an entry), then evicts the oldest entries until the directory holds
at most ``capacity_bytes``; eviction holds an flock on the directory's lock file, so two processes
never evict the same entry twice. An entry larger than the capacity is returned and not kept.
Counters (hits, misses, evictions, bytes read from the tier and written to it) are per process;
``resident_bytes()`` is the directory's.

The tier owns only what it writes: a folder of its own, ``<cache_dir>/dlbench-disk-tier``
(``own_folder``), with a marker file; emptying the tier (``clear``) removes that folder and nothing
else, and refuses a folder of that name without the marker; eviction deletes only the tier's own
entries (40 hex digits), never another file.

This is not the ``cache`` axis (which keeps samples in RAM behind a reader): it sits under a remote
reader, so that a second epoch, another worker or another rank reads from the local disk instead of
the network.
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import threading
from collections.abc import Callable
from pathlib import Path

LOCK = ".lock"
FOLDER = "dlbench-disk-tier"  # the tier's own folder inside the cache_dir a scenario names
MARKER = ".dlbench-disk-tier"  # written when the harness creates that folder


def own_folder(cache_dir: str | Path) -> Path:
    """The tier's folder under `cache_dir`, created with its marker (a folder of that name the
    harness did not create is refused: ValueError)."""
    folder = Path(cache_dir) / FOLDER
    if folder.exists() and not (folder / MARKER).is_file():
        raise ValueError(f"cache_dir {cache_dir}: {folder} exists and was not made by the disk tier (no {MARKER}); "
                         f"name another cache_dir, or remove that folder yourself")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / MARKER).touch()
    return folder


def clear(cache_dir: str | Path) -> None:
    """Empty the tier: its own folder under `cache_dir` (marked) is removed; nothing else in
    `cache_dir`."""
    folder = own_folder(cache_dir)
    shutil.rmtree(folder, ignore_errors=True)


def _is_entry(name: str) -> bool:
    return len(name) == 40 and all(c in "0123456789abcdef" for c in name)


class DiskTier:
    def __init__(self, directory: str | Path, capacity_bytes: int):
        self.directory = Path(directory)
        self.capacity_bytes = int(capacity_bytes)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self.hits = self.misses = self.evictions = self.bytes_hit = self.bytes_written = 0

    def __getstate__(self):
        return {"directory": self.directory, "capacity_bytes": self.capacity_bytes}

    def __setstate__(self, state):
        self.__init__(state["directory"], state["capacity_bytes"])

    def path(self, key: str) -> Path:
        return self.directory / hashlib.sha1(key.encode()).hexdigest()

    def get(self, key: str) -> bytes | None:
        """The entry's bytes (a hit, made most recent) or None (a miss); counted."""
        path = self.path(key)
        try:
            with open(path, "rb") as f:
                data = f.read()
            os.utime(path)
        except FileNotFoundError:
            data = None
        with self._lock:
            if data is None:
                self.misses += 1
            else:
                self.hits += 1
                self.bytes_hit += len(data)
        return data

    def put(self, key: str, data: bytes) -> None:
        """Keep an entry (unless it is larger than the whole tier), evicting the least recent to
        fit."""
        if len(data) <= self.capacity_bytes:
            self._keep(self.path(key), data)

    def fetch(self, key: str, load: Callable[[], bytes]) -> bytes:
        data = self.get(key)
        if data is None:
            data = load()
            self.put(key, data)
        return data

    def _keep(self, path: Path, data: bytes) -> None:
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
        with self._lock:
            self.bytes_written += len(data)
        self._evict()

    def _entries(self) -> list[tuple[float, int, Path]]:
        out = []
        with os.scandir(self.directory) as it:
            for e in it:
                if not _is_entry(e.name):  # the tier's own entries only: never another file in the folder
                    continue
                try:
                    st = e.stat()
                except FileNotFoundError:
                    continue
                out.append((st.st_mtime, st.st_size, Path(e.path)))
        return out

    def _evict(self) -> None:
        with open(self.directory / LOCK, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                entries = sorted(self._entries(), key=lambda e: e[0])
                total = sum(size for _, size, _ in entries)
                for _, size, path in entries:
                    if total <= self.capacity_bytes:
                        break
                    try:
                        path.unlink()
                    except FileNotFoundError:
                        continue
                    total -= size
                    with self._lock:
                        self.evictions += 1
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def resident_bytes(self) -> int:
        return sum(size for _, size, _ in self._entries())

    def stats(self) -> dict:
        with self._lock:
            return {"disk_hits": self.hits, "disk_misses": self.misses, "disk_evictions": self.evictions,
                    "disk_bytes_hit": self.bytes_hit, "disk_bytes_written": self.bytes_written,
                    "disk_capacity_bytes": self.capacity_bytes}
