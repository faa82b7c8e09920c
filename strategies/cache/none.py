"""No cache: every read goes to storage."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from strategies.protocols import CacheBase
from strategies.registry import register


class Uncached:
    """``fetch`` unchanged, with the cache statistics of no cache (None); picklable if ``fetch``
    is."""

    def __init__(self, fetch: Callable[[list], list]):
        self.fetch = fetch

    def __call__(self, indices) -> list:
        return self.fetch(indices)

    def stats(self) -> None:
        return None


@register("cache", "none")
class NoCache(CacheBase):
    scope = "none"
    level = "stored"

    def wrap(self, fetch: Callable[[list], list], sizeof: Callable[[Any], int]) -> Uncached:
        return Uncached(fetch)
