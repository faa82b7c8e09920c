"""The byte-bounded LRU map behind the lru cache, used in a worker (scope "worker") or in the cache
server."""
from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable, Iterable
from typing import Any


class LRUStore:
    """An LRU map key -> (value, nbytes); resident bytes never exceed the capacity. Thread-safe."""

    def __init__(self, capacity_bytes: int):
        self.capacity_bytes = int(capacity_bytes)
        self._data: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._lock = threading.Lock()
        self.resident_bytes = self.hits = self.misses = self.evictions = 0

    def get_many(self, keys: Iterable[Hashable]) -> dict:
        """The cached values among ``keys`` (each hit becomes most recent); counts hits and
        misses."""
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
