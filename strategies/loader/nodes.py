"""nodes: torchdata.nodes (``pip install torchdata``) in the rank process: a ParallelMapper of ``threads``
threads (0: the scenario's workers, at least 1) each preparing whole batches, ``prefetch`` batches per thread
in flight, in the batch sampler's order (harness.train.nodesloader). Absent the package, the axis excludes
it with one line."""
from __future__ import annotations

import importlib

from strategies.params import integer
from strategies.protocols import LoaderBase
from strategies.registry import Unavailable, register

INSTALL = ("the nodes loader needs the torchdata package: pip install torchdata==0.11.0 (the README's test command "
           "installs it)")


@register("loader", "nodes")
class NodesLoader(LoaderBase):
    kind = "nodes"

    def __init__(self, threads: int = 0, prefetch: int = 2) -> None:
        try:
            importlib.import_module("torchdata.nodes")
        except ImportError:
            raise Unavailable(INSTALL) from None
        self.threads = integer("threads", threads, 0)
        self.prefetch = integer("prefetch", prefetch, 1)
