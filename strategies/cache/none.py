"""No cache: every read goes to storage."""
from __future__ import annotations

from strategies.registry import register


@register("cache", "none")
class NoCache:
    scope = "none"
    level = "stored"

    def wrap(self, fetch, sizeof):
        return fetch
