"""nodes: torchdata.nodes (``pip install torchdata``) in the rank process: a ParallelMapper of
``threads`` threads (0: the scenario's workers, at least 1) each preparing whole batches,
``prefetch`` batches per thread in flight, in the batch sampler's order. Absent the package, the
axis excludes it with one line.

Its pipeline, NodesPipeline, is built as torchdata.nodes' documentation builds a map-style pipeline
with threads: the batch sampler's index lists (IterableWrapper) -> ParallelMapper(method="thread",
in_order=True), each thread preparing whole batches (the Dataset's __getitems__ and the collate) ->
PinMemory on a GPU -> Prefetcher -> Loader. It keeps the sampler contract (every batch once, in
order) and the thread loader's CPU accounting (strategies.loader.threads.BatchThreadPool:
per-thread CPU clock around each batch, reported as the loader's), so a cell differs from loader =
"threads" by the pipeline library alone.

Resumable: while it iterates, ``state_dict()`` is the nodes Loader's own state; a pipeline given
that state as ``initial_state`` before its iteration restores it (torchdata.nodes fast-forwards the
index lists), which is how harness.checks.resume.measuring measures a mid-epoch resume."""
from __future__ import annotations

import importlib

from strategies.loader.threads import BatchThreadPool, InProcessLoader
from strategies.params import integer
from strategies.registry import Unavailable, register

INSTALL = ("the nodes loader needs the torchdata package: pip install torchdata==0.11.0 (the README's test command "
           "installs it)")


class NodesPipeline(BatchThreadPool):
    initial_state: dict | None = None  # a Loader state_dict() to resume from (harness.checks.resume.measuring)
    _loader = None  # the nodes Loader while an iteration runs

    def state_dict(self) -> dict:
        """The running nodes Loader's state (after the batches delivered so far)."""
        if self._loader is None:
            raise RuntimeError("state_dict() of a nodes pipeline that is not iterating")
        return self._loader.state_dict()

    def __iter__(self):
        from torchdata import nodes  # optional: the loader axis excludes this strategy without it

        node = nodes.IterableWrapper(list(indices) for indices in self.batch_sampler)
        node = nodes.ParallelMapper(node, map_fn=self._prepare, num_workers=self.threads, in_order=True,
                                    method="thread")  # its own queue: in flight at most its workers' batches
        node = nodes.Prefetcher(node, prefetch_factor=self.depth)  # threads x prefetch batches ready
        loader = nodes.Loader(node, restart_on_stop_iteration=False)
        if self.initial_state is not None:
            loader.load_state_dict(self.initial_state)
        self._loader = loader
        try:
            yield from loader
        finally:  # closed early (a cell that stopped): the mapper's threads stop when it is collected
            self._loader = None
            del loader, node

    def _prepare(self, indices: list[int]) -> dict:
        return self._load(indices)  # pinned here on a GPU, as the thread loader pins (its `send` stage)


@register("loader", "nodes")
class NodesLoader(InProcessLoader):
    kind = "nodes"
    pool = NodesPipeline

    def __init__(self, threads: int = 0, prefetch: int = 2) -> None:
        try:
            importlib.import_module("torchdata.nodes")
        except ImportError:
            raise Unavailable(INSTALL) from None
        self.threads = integer("threads", threads, 0)
        self.prefetch = integer("prefetch", prefetch, 1)
