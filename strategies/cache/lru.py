"""Least-recently-used cache bounded by bytes, per DataLoader worker or shared by all workers of a
rank.

``LRUCache(capacity_mb, scope, level).wrap(fetch, sizeof)`` returns a :class:`CachedFetch`: called
with a batch of indices, it looks them all up at once, reads every miss in ONE ``fetch(missing)``
call (in first-seen order, each distinct index once), stores what it read and returns the items in
the requested order.

Counting, per batch: ``misses`` = distinct indices read from storage; ``hits`` = the other
requested positions (so hits + misses = items requested, and a duplicate of a missed index in the
same batch counts as a hit).

scope "worker": each process has its own :class:`LRUStore`; pickling a CachedFetch drops the
contents, so every DataLoader worker starts empty. scope "shared": one store per rank, served by a
cache-server process (:mod:`strategies.cache.lru_shared`); the pickled CachedFetch carries its
address and reconnects per process.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from strategies.cache.lru_shared import CacheServer
from strategies.cache.lrumap import LRUStore
from strategies.params import choice, number
from strategies.protocols import CacheBase
from strategies.registry import register
from strategies.sample import Sample

SCOPES = ("worker", "shared")
LEVELS = ("stored", "decoded")


class CachedFetch:
    """``fetch`` behind a cache store; callable like ``fetch``; picklable if ``fetch`` and
    ``sizeof`` are."""

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
            # a stored sample may be a row of its batch's shared buffer: keep an owned copy, so the cache
            # holds what it counts and not the whole batch
            self.store.put_many([(k, v.detached() if isinstance(v, Sample) else v, int(self.sizeof(v)))
                                 for k, v in read.items()])
            found.update(read)
        return [found[i] for i in indices]

    def stats(self) -> dict:
        return {**self.store.stats(), "scope": self.scope, "level": self.level}


@register("cache", "lru")
class LRUCache(CacheBase):
    """Strategy: an LRU cache of ``capacity_mb`` MiB per worker (scope "worker") or per rank
    ("shared")."""

    def __init__(self, capacity_mb: float = 64, scope: str = "worker", level: str = "stored"):
        number("capacity_mb", capacity_mb, 0)
        self.capacity_mb, self.scope, self.level = capacity_mb, choice("scope", scope, SCOPES), \
            choice("level", level, LEVELS)
        self.capacity_bytes = int(capacity_mb * 1024 * 1024)
        self._server = None  # the rank's cache server (scope "shared"), started by the first wrap

    def wrap(self, fetch: Callable[[list], list], sizeof: Callable[[Any], int]) -> CachedFetch:
        if self.scope == "worker":
            store = LRUStore(self.capacity_bytes)
        else:
            if self._server is None:
                self._server = CacheServer()
            store = self._server.new_store(self.capacity_bytes)
        return CachedFetch(fetch, sizeof, store, self.scope, self.level)

    def close(self) -> None:
        """Stop the cache server now (it also stops when this object is collected or the process
        exits)."""
        if self._server is not None:
            self._server.close()
            self._server = None

    def __getstate__(self) -> dict:  # the server handle stays in the process that started it
        return {**self.__dict__, "_server": None}
