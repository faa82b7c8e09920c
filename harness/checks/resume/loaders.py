"""check-resume's loaders: each case's loader built as a run builds it (harness.train.pipeline, one
rank, no training) or litdata's own StreamingDataLoader, restored the case's way from a state
(none, the harness's position, the loader's own state_dict), read batch by batch and stopped for
real. measuring.py runs the cases."""
from __future__ import annotations

import itertools
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from torch.utils.data import DataLoader

from harness.config.matrix import Cell
from harness.config.scenario import Scenario
from harness.train import pipeline


@dataclass
class HostDevice:
    """The device a loader-only build needs: emulated (no pinning, the catalogue's memory
    model)."""

    emulated: bool = True


@dataclass
class LoaderContext:
    """What harness.train.pipeline.build reads of a rank's context, for one rank without
    training."""

    scenario: Scenario
    data_paths: dict[str, Path]
    rank: int = 0
    world_size: int = 1
    device: HostDevice = field(default_factory=HostDevice)
    remote_counters: Path | None = None


@dataclass
class Job:
    """One case, picklable for the fresh process: a cell (None: litdata's own loader) and a way of
    resuming."""

    ctx: LoaderContext
    cell: Cell | None
    method: str
    loader: str
    storage: str
    sampler: str
    files: list[Path]
    litdata_path: Path | None = None


class Skipped:
    """A batch sampler without its first ``n`` batches: the harness's position in an epoch."""

    def __init__(self, batch_sampler, n: int):
        self.batch_sampler, self.n = batch_sampler, n

    def __iter__(self):
        return itertools.islice(iter(self.batch_sampler), self.n, None)

    def __len__(self) -> int:
        return max(0, len(self.batch_sampler) - self.n)


def _like(loader: DataLoader, cls, batch_sampler):
    """A DataLoader (or a drop-in class) with ``loader``'s settings over another batch sampler."""
    w = loader.num_workers
    return cls(loader.dataset, batch_sampler=batch_sampler, num_workers=w, collate_fn=loader.collate_fn,
               pin_memory=loader.pin_memory, persistent_workers=loader.persistent_workers,
               prefetch_factor=loader.prefetch_factor if w else None,
               multiprocessing_context=loader.multiprocessing_context if w else None)


class HarnessRun:
    """A cell's loader as a run builds it, restored the job's way from ``state`` (None: from the
    start)."""

    def __init__(self, job: Job, state: dict | None):
        self.job, self.pipe = job, pipeline.build(job.ctx, job.cell)
        loader, sampler = self.pipe.loader, self.pipe.batch_sampler
        if job.method == "position" and state:
            sampler = Skipped(sampler, state["batches"])
        if isinstance(loader, DataLoader):
            if job.method == "state":
                from torchdata.stateful_dataloader import StatefulDataLoader

                with warnings.catch_warnings():  # its constructor calls torch.set_vital, deprecated in torch 2.13
                    warnings.filterwarnings("ignore", message="'set_vital' is deprecated", category=UserWarning)
                    loader = _like(loader, StatefulDataLoader, sampler)
                if state:
                    loader.load_state_dict(state)
            elif sampler is not self.pipe.batch_sampler:
                loader = _like(loader, DataLoader, sampler)
        else:
            loader.batch_sampler = sampler
            if job.method == "state" and state:
                loader.initial_state = state
        self.loader, self.delivered = loader, 0
        self.it = iter(loader)

    def next(self) -> list[int]:
        batch = next(self.it)
        self.delivered += 1
        return batch["index"].tolist()

    def state(self) -> dict | None:
        if self.job.method == "position":
            return {"batches": self.delivered}
        return self.loader.state_dict() if self.job.method == "state" else None

    def close(self) -> None:
        """A real stop: the iterator closed (its workers or threads ended), the readers closed."""
        it, self.it = self.it, None
        if hasattr(it, "close"):  # a generator: the thread pool, nodes, SPDL
            it.close()
        if hasattr(it, "_shutdown_workers"):  # a DataLoader's iterator: its worker processes
            it._shutdown_workers()
        reader = getattr(self.pipe.loader.dataset, "reader", None) if self.pipe.loader is not None else None
        self.loader = None
        self.pipe.close()
        if reader is not None and hasattr(reader, "close"):
            reader.close()


def item_index(items: list[dict]) -> list[int]:
    """litdata's batch as its sample indices (module level: the loader's workers pickle it)."""
    return [int(it["index"]) for it in items]


class LitdataRun:
    """litdata's StreamingDataLoader over the litdata storage's chunks, shuffled by litdata with
    the scenario's seed, restored from its own state_dict (None: from the start)."""

    def __init__(self, job: Job, state: dict | None):
        import litdata

        tr = job.ctx.scenario.training
        dataset = litdata.StreamingDataset(str(job.litdata_path), shuffle=True, seed=tr.seed, batch_decode=0)
        self.job = job
        self.loader = litdata.StreamingDataLoader(dataset, batch_size=tr.batch_size, num_workers=tr.workers,
                                                  collate_fn=item_index)
        if state and job.method == "state":
            self.loader.load_state_dict(state)
        self.it = iter(self.loader)

    def next(self) -> list[int]:
        return list(next(self.it))

    def state(self) -> dict | None:
        return self.loader.state_dict() if self.job.method == "state" else None

    def close(self) -> None:
        it, self.it = self.it, None
        if hasattr(it, "_shutdown_workers"):
            it._shutdown_workers()
        self.loader = None


def open_run(job: Job, state: dict | None):
    return LitdataRun(job, state) if job.cell is None else HarnessRun(job, state)


def read_rest(run) -> list[int]:
    out: list[int] = []
    while True:
        try:
            out += run.next()
        except StopIteration:
            return out
