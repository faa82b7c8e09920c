"""Least-recently-used cache bounded by bytes, per DataLoader worker or shared by all workers of a rank.

``LRUCache(capacity_mb, scope, level).wrap(fetch, sizeof)`` returns a :class:`CachedFetch`: called with a
batch of indices, it looks them all up at once, reads every miss in ONE ``fetch(missing)`` call (in first-seen
order, each distinct index once), stores what it read and returns the items in the requested order.

Counting, per batch: ``misses`` = distinct indices read from storage; ``hits`` = the other requested positions
(so hits + misses = items requested, and a duplicate of a missed index in the same batch counts as a hit).

scope "worker": each process has its own :class:`LRUStore`; pickling a CachedFetch drops the contents, so
every DataLoader worker starts empty. scope "shared": one store per rank, served by a cache-server process
(:mod:`strategies.cache.lru_shared`); the pickled CachedFetch carries its address and reconnects per process.
"""
from __future__ import annotations

import math
import threading
from collections import OrderedDict
from typing import Any, Callable, Hashable, Iterable

from strategies.registry import register

SCOPES = ("worker", "shared")
LEVELS = ("stored", "decoded")


class LRUStore:
    """An LRU map key -> (value, nbytes); resident bytes never exceed the capacity. Thread-safe."""

    def __init__(self, capacity_bytes: int):
        self.capacity_bytes = int(capacity_bytes)
        self._data: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._lock = threading.Lock()
        self.resident_bytes = self.hits = self.misses = self.evictions = 0

    def get_many(self, keys: Iterable[Hashable]) -> dict:
        """The cached values among ``keys`` (each hit becomes most recent); counts hits and misses."""
        keys = list(keys)
        found: dict = {}
        missing: set = set()
        with self._lock:
            for k in keys:
                if k in found or k in missing:
                    continue
                entry = self._data.get(k)
                if entry is None:
                    missing.add(k)
                else:
                    self._data.move_to_end(k)
                    found[k] = entry[0]
            self.misses += len(missing)
            self.hits += len(keys) - len(missing)
        return found

    def put_many(self, items: Iterable[tuple[Hashable, Any, int]]) -> None:
        """Insert (key, value, nbytes) triples, most recent last; evict the least recent to fit."""
        with self._lock:
            for key, value, nbytes in items:
                old = self._data.pop(key, None)
                if old is not None:
                    self.resident_bytes -= old[1]
                if nbytes > self.capacity_bytes:
                    continue  # larger than the whole cache: never cached
                self._data[key] = (value, nbytes)
                self.resident_bytes += nbytes
                while self.resident_bytes > self.capacity_bytes:
                    _, (_, evicted) = self._data.popitem(last=False)
                    self.resident_bytes -= evicted
                    self.evictions += 1

    def keys(self) -> list:
        """Keys from least to most recently used."""
        with self._lock:
            return list(self._data)

    def stats(self) -> dict:
        with self._lock:
            return {"hits": self.hits, "misses": self.misses, "evictions": self.evictions,
                    "resident_bytes": self.resident_bytes, "capacity_bytes": self.capacity_bytes,
                    "items": len(self._data)}

    def __getstate__(self) -> dict:  # a pickled store is an empty store of the same capacity
        return {"capacity_bytes": self.capacity_bytes}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["capacity_bytes"])


class CachedFetch:
    """``fetch`` behind a cache store; callable like ``fetch``; picklable if ``fetch`` and ``sizeof`` are."""

    def __init__(self, fetch: Callable[[list], list], sizeof: Callable[[Any], int], store, scope: str,
                 level: str):
        self.fetch, self.sizeof, self.store = fetch, sizeof, store
        self.scope, self.level = scope, level

    def __call__(self, indices) -> list:
        indices = list(indices)
        found = self.store.get_many(indices)
        missing = list(dict.fromkeys(i for i in indices if i not in found))
        if missing:
            items = list(self.fetch(missing))
            if len(items) != len(missing):
                raise RuntimeError(f"fetch returned {len(items)} items for {len(missing)} indices")
            read = dict(zip(missing, items))
            self.store.put_many([(k, v, int(self.sizeof(v))) for k, v in read.items()])
            found.update(read)
        return [found[i] for i in indices]

    def stats(self) -> dict:
        return {**self.store.stats(), "scope": self.scope, "level": self.level}


@register("cache", "lru")
class LRUCache:
    """Strategy: an LRU cache of ``capacity_mb`` MiB per worker (scope "worker") or per rank ("shared")."""

    def __init__(self, capacity_mb: float = 64, scope: str = "worker", level: str = "stored"):
        if isinstance(capacity_mb, bool) or not isinstance(capacity_mb, (int, float)) \
                or not math.isfinite(capacity_mb) or capacity_mb < 0:
            raise ValueError(f"cache lru: capacity_mb must be a finite number >= 0, got {capacity_mb!r}")
        if scope not in SCOPES:
            raise ValueError(f"cache lru: scope must be one of {', '.join(SCOPES)}; got {scope!r}")
        if level not in LEVELS:
            raise ValueError(f"cache lru: level must be one of {', '.join(LEVELS)}; got {level!r}")
        self.capacity_mb, self.scope, self.level = capacity_mb, scope, level
        self.capacity_bytes = int(capacity_mb * 1024 * 1024)
        self._server = None  # the rank's cache server (scope "shared"), started by the first wrap

    def wrap(self, fetch: Callable[[list], list], sizeof: Callable[[Any], int]) -> CachedFetch:
        if self.scope == "worker":
            store = LRUStore(self.capacity_bytes)
        else:
            from strategies.cache.lru_shared import CacheServer

            if self._server is None:
                self._server = CacheServer()
            store = self._server.new_store(self.capacity_bytes)
        return CachedFetch(fetch, sizeof, store, self.scope, self.level)

    def close(self) -> None:
        """Stop the cache server now (it also stops when this object is collected or the process exits)."""
        if self._server is not None:
            self._server.close()
            self._server = None

    def __getstate__(self) -> dict:  # the server handle stays in the process that started it
        return {**self.__dict__, "_server": None}
