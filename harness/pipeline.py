"""Build one cell's input pipeline on one rank:
storage reader -> cache -> SampleDataset(__getitems__) -> sampler -> batching -> DataLoader workers.

It also derives what the cost-aware strategies need: per-sample costs (the decode work, i.e. source
pixels at the decoder's reduced scale, for pixels; stored bytes for features or with cost = "bytes"), the modelled device cost of a batch and the budget that fits the accelerator's memory.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from torch.utils.data import DataLoader

from harness.dataset import DatasetSpec, image_sides
from harness.matrix import Cell
from harness.items import FIELDS_FOR, SampleDataset, collate, decoded_pixels


def resized_shapes(spec: DatasetSpec, image_size: int) -> np.ndarray:
    """int64[N, 2] (height, width) after the pixels workload's resize (same rounding as decode_resize)."""
    sides = image_sides(spec).astype(np.float64)
    scale = image_size / sides.max(axis=1)
    return np.maximum(1, np.round(sides * scale[:, None])).astype(np.int64)


@dataclass
class BatchCost:
    """Modelled device bytes of a batch, from the resized image shapes (picklable, no closures)."""

    accelerator: object
    workload: str
    shapes: np.ndarray | None

    def __call__(self, indices: list[int]) -> float:
        n = len(indices)
        if self.workload != "pixels" or n == 0:
            return float(self.accelerator.memory_needed(self.workload, n, 0))
        hw = self.shapes[indices]
        return float(self.accelerator.memory_needed(self.workload, n, n * int(hw[:, 0].max() * hw[:, 1].max())))


@dataclass
class Pipeline:
    loader: DataLoader
    sampler: object
    batch_sampler: object
    batching: object
    cache: object
    costs: np.ndarray | None = None  # per-sample cost the balanced sampler balances, index-aligned

    def shared_cache_stats(self):
        """A call that reads the rank-wide shared cache's statistics, or None (no SampleDataset here)."""
        dataset = self.loader.dataset
        return dataset.shared_stats if isinstance(dataset, SampleDataset) else None

    def close(self) -> None:
        """Stop what the cell started: drop the loader (its workers stop once the iterator is closed too,
        see BatchSource.close) and close the cache strategy (a shared cache stops its server)."""
        self.loader = None
        if self.cache is not None:  # None: a synthetic pipeline without a cache strategy
            self.cache.close()


def build(ctx, cell: Cell) -> Pipeline:
    sc, tr = ctx.scenario, ctx.scenario.training
    storage_choice = cell.choice("storage")
    reader = storage_choice.create().open(ctx.data_paths[storage_choice.name], fields=FIELDS_FOR[tr.workload])
    cache = cell.choice("cache").create()
    dataset = SampleDataset(reader, tr.workload, tr.image_size, cache=cache)
    shapes = resized_shapes(sc.dataset, tr.image_size) if tr.workload == "pixels" else None
    sampler_strategy = cell.choice("sampler").create()
    if sampler_strategy.cost == "bytes" or shapes is None:
        costs = np.asarray(reader.stored_bytes(), dtype=np.float64)
    else:  # the decode work: source pixels at the decoder's reduced scale
        costs = decoded_pixels(image_sides(sc.dataset), tr.image_size).astype(np.float64)
    sampler = sampler_strategy.sampler(size=len(dataset), num_replicas=ctx.world_size, rank=ctx.rank,
                                       seed=tr.seed, costs=costs, batch_size=tr.batch_size)
    batching = cell.choice("batching").create()
    sort_key = shapes[:, 0] / shapes[:, 1] if shapes is not None else costs
    batch_sampler = batching.batch_sampler(
        sampler, tr.batch_size, batch_cost=BatchCost(sc.accelerator, tr.workload, shapes),
        budget=float(sc.accelerator.memory_bytes), sort_key=sort_key, rank=ctx.rank,
        world_size=ctx.world_size)
    workers = tr.workers
    loader = DataLoader(
        dataset, batch_sampler=batch_sampler, num_workers=workers, collate_fn=collate,
        pin_memory=not ctx.device.emulated,
        persistent_workers=tr.persistent_workers and workers > 0,
        prefetch_factor=tr.prefetch_factor if workers > 0 else None,
        # forking a rank that already runs gloo threads aborts at worker exit; the forkserver is clean
        multiprocessing_context="forkserver" if workers > 0 else None)
    return Pipeline(loader, sampler, batch_sampler, batching, cache, costs)
