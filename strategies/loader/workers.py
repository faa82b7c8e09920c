"""workers: torch's DataLoader with the scenario's worker processes (``[training] workers``)."""
from __future__ import annotations

from torch.utils.data import DataLoader

from strategies.params import flag
from strategies.protocols import LoaderBase, LoaderInputs
from strategies.registry import register


@register("loader", "workers")
class WorkerLoader(LoaderBase):
    kind = "workers"

    def __init__(self, side_stream: bool = False) -> None:
        self.side_stream = flag("side_stream", side_stream)

    def pipeline(self, inputs: LoaderInputs) -> DataLoader:
        workers = inputs.workers
        return DataLoader(
            inputs.dataset, batch_sampler=inputs.batch_sampler, num_workers=workers, collate_fn=inputs.collate,
            pin_memory=inputs.pin, persistent_workers=inputs.persistent_workers and workers > 0,
            prefetch_factor=inputs.prefetch_factor if workers > 0 else None,
            # forking a rank that already runs gloo threads aborts at worker exit; the forkserver is clean
            multiprocessing_context="forkserver" if workers > 0 else None)
