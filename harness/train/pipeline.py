"""Build one cell's input pipeline on one rank: storage reader -> cache ->
SampleDataset(__getitems__) -> sampler -> batching -> loader (DataLoader worker processes, or
threads of the rank: the loader axis, whose strategy builds it from LoaderInputs), with pixels
prepared where the preprocess axis says.

It also derives what the cost-aware strategies need: per-sample costs (the decode work, i.e. source
pixels at the decoder's reduced scale, for pixels; stored bytes for features or with cost =
"bytes"), the device cost of a batch and the budget that fits the device's memory: modelled from
the catalogue on an emulated device, measured (a probe at two batch sizes, harness.device.memprobe)
against torch.cuda.mem_get_info on CUDA.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from harness.config.matrix import Cell
from harness.data.decoders import decoded_pixels, resized_shapes
from harness.data.fields import FIELDS_FOR
from harness.data.generator import image_sides
from harness.data.storageunits import note as note_units
from harness.train.devprep import DevicePrep
from harness.train.stagetimer import note_send
from harness.train.torchdataset import Collate, SampleDataset
from strategies.protocols import LoaderInputs


@dataclass
class BatchCost:
    """Modelled device bytes of a batch, from the resized image shapes (picklable, no closures)."""

    accelerator: object
    workload: str
    shapes: np.ndarray | None
    rate: str = "amp"  # the catalogue rate the cell's precision selects
    measured: tuple | None = None  # CUDA: (base bytes, bytes per padded pixel or per sample), measured

    def __call__(self, indices: list[int]) -> float:
        n = len(indices)
        pixels = 0
        if self.workload == "pixels" and n:
            hw = self.shapes[indices]
            pixels = n * int(hw[:, 0].max() * hw[:, 1].max())
        if self.measured is not None:
            base, per_unit = self.measured
            return float(base + per_unit * (pixels or n))
        return float(self.accelerator.memory_needed(self.workload, n, pixels, self.rate))


@dataclass
class Pipeline:
    loader: object  # what the loader strategy built (Loader.pipeline): a DataLoader, or threads of the rank
    sampler: object
    batch_sampler: object
    batching: object
    cache: object
    costs: np.ndarray | None = None  # per-sample cost the balanced sampler balances, index-aligned
    devprep: DevicePrep | None = None  # preprocess = device: fills in pixel counts, makes the images
    side_stream: bool = False  # copy the next batch on a side CUDA stream (a no-op without CUDA)
    in_process: bool = False  # the loader prepares batches in threads of the rank (Loader.in_process)

    @property
    def loader_kind(self) -> str:
        return "threads" if self.in_process else "workers"

    def loader_thread_cpu_s(self) -> float:
        """CPU seconds of a thread loader's threads so far (0 for worker processes, measured
        elsewhere)."""
        return self.loader.cpu_s if self.in_process else 0.0

    def shared_cache_stats(self):
        """A call that reads the rank-wide shared cache's statistics, or None (no SampleDataset
        here)."""
        dataset = self.loader.dataset
        return dataset.shared_stats if isinstance(dataset, SampleDataset) else None

    def close(self) -> None:
        """Stop what the cell started: drop the loader (its workers stop once the iterator is
        closed too, see BatchSource.close) and close the cache strategy (a shared cache stops its
        server)."""
        self.loader = None
        if self.cache is not None:  # None: a synthetic pipeline without a cache strategy
            self.cache.close()


def _budget(ctx, accelerator, rate: str) -> tuple[float, tuple | None]:
    """The dynamic batching's memory budget and, on CUDA, the measured cost model (base, per
    unit)."""
    model = getattr(ctx.device, "memory_model", None)
    if model is not None:
        return float(model[2]), (model[0], model[1])
    return float(accelerator.memory_bytes), None


def _loader_inputs(ctx, dataset, batch_sampler, collate) -> LoaderInputs:
    """What the cell's loader strategy builds the rank's loader from (Loader.pipeline)."""
    tr = ctx.scenario.training
    return LoaderInputs(dataset, batch_sampler, collate, workers=tr.workers, prefetch_factor=tr.prefetch_factor,
                        persistent_workers=tr.persistent_workers, pin=not ctx.device.emulated, note_send=note_send)


def _costs(tr, reader, sampler_strategy, sides: np.ndarray | None) -> np.ndarray:
    if sampler_strategy.cost == "bytes" or sides is None:
        return np.asarray(reader.stored_bytes(), dtype=np.float64)
    # the decode work: source pixels at the decoder's reduced scale
    return decoded_pixels(sides, tr.image_size, tr.decoder).astype(np.float64)


@lru_cache(maxsize=4)
def dataset_sides(spec) -> np.ndarray:
    """Every image's (height, width) of the scenario's dataset, drawn once per rank process and
    read-only: each visit builds its pipeline anew, and drawing them again cost every rank about
    0.1 s of CPU per visit (of 2000 samples; four ranks on two cores, about 0.25 s of each visit's
    time outside its window)."""
    sides = image_sides(spec)
    sides.setflags(write=False)
    return sides


def build(ctx, cell: Cell) -> Pipeline:
    sc, tr = ctx.scenario, ctx.scenario.training
    storage_choice = cell.choice("storage")
    storage, data_path = storage_choice.create(), ctx.data_paths[storage_choice.label]
    reader = storage.open(data_path, fields=FIELDS_FOR[tr.workload])
    note_units(cell.id, storage, data_path)  # for the cell's order figures (harness.data.storageunits)
    if ctx.remote_counters is not None and hasattr(reader, "count_into"):  # a remote reader's counters
        reader.count_into(ctx.remote_counters)
    cache = cell.choice("cache").create()
    prep = cell.choice("preprocess").create()
    dataset = SampleDataset(reader, tr.workload, tr.image_size, cache=cache, preprocess=prep,
                            decoder=tr.decoder)
    sides = dataset_sides(sc.dataset) if tr.workload == "pixels" else None
    shapes = resized_shapes(sides, tr.image_size) if sides is not None else None
    sampler_strategy = cell.choice("sampler").create()
    costs = _costs(tr, reader, sampler_strategy, sides)
    shards = {"shards": storage.shards(data_path)} if sampler_strategy.uses_shards else {}
    sampler = sampler_strategy.sampler(size=len(dataset), num_replicas=ctx.world_size, rank=ctx.rank,
                                       seed=tr.seed, costs=costs, batch_size=tr.batch_size, **shards)
    batching = cell.choice("batching").create()
    sort_key = shapes[:, 0] / shapes[:, 1] if shapes is not None else costs
    rate = cell.choice("precision").create().rate
    budget, measured = _budget(ctx, sc.accelerator, rate)
    batch_sampler = batching.batch_sampler(
        sampler, tr.batch_size, batch_cost=BatchCost(sc.accelerator, tr.workload, shapes, rate, measured),
        budget=budget, sort_key=sort_key, rank=ctx.rank, world_size=ctx.world_size)
    loader_strategy = cell.choice("loader").create()
    loader = loader_strategy.pipeline(
        _loader_inputs(ctx, dataset, batch_sampler, Collate(prep.normalise and prep.where == "host")))
    devprep = DevicePrep(shapes, sides, prep.flip) if prep.where == "device" and shapes is not None else None
    return Pipeline(loader, sampler, batch_sampler, batching, cache, costs, devprep,
                    loader_strategy.side_stream and not ctx.device.emulated, loader_strategy.in_process)
