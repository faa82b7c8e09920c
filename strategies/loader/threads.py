"""threads: a bounded pool of threads in the rank process, each preparing whole batches (read, decode,
collate), ``prefetch`` batches per thread in flight, delivered in the batch sampler's order. ``threads`` 0
means the scenario's workers (at least 1). Decoding releases the GIL (PIL, numpy), so threads overlap."""
from __future__ import annotations

from strategies.params import flag, integer
from strategies.protocols import LoaderBase
from strategies.registry import register


@register("loader", "threads")
class ThreadLoader(LoaderBase):
    kind = "threads"

    def __init__(self, threads: int = 0, prefetch: int = 2, side_stream: bool = False) -> None:
        self.threads = integer("threads", threads, 0)
        self.prefetch = integer("prefetch", prefetch, 1)
        self.side_stream = flag("side_stream", side_stream)
