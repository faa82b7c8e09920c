"""loader = "nodes": torchdata.nodes, built as its documentation builds a map-style pipeline with threads:
the batch sampler's index lists (IterableWrapper) -> ParallelMapper(method="thread", in_order=True), each
thread preparing whole batches (the Dataset's __getitems__ and the collate) -> PinMemory on a GPU ->
Prefetcher -> Loader. It keeps the sampler contract (every batch once, in order) and the thread loader's CPU
accounting (harness.train.threadloader.BatchThreadPool: per-thread CPU clock around each batch, reported as
the loader's), so a cell differs from loader = "threads" by the pipeline library alone."""
from __future__ import annotations

from harness.train.threadloader import BatchThreadPool


class NodesPipeline(BatchThreadPool):
    def __iter__(self):
        from torchdata import nodes  # optional: the loader axis excludes this strategy without it

        node = nodes.IterableWrapper(list(indices) for indices in self.batch_sampler)
        node = nodes.ParallelMapper(node, map_fn=self._prepare, num_workers=self.threads, in_order=True,
                                    method="thread")  # its own queue: in flight at most its workers' batches
        node = nodes.Prefetcher(node, prefetch_factor=self.depth)  # threads x prefetch batches ready
        loader = nodes.Loader(node, restart_on_stop_iteration=False)
        try:
            yield from loader
        finally:  # closed early (a cell that stopped): the mapper's threads stop when it is collected
            del loader, node

    def _prepare(self, indices: list[int]) -> dict:
        return self._load(indices)  # pinned here on a GPU, as the thread loader pins (its `send` stage)
