"""One protocol per axis: what the harness may call on a strategy, and nothing else.

The precision and preprocess axes are declarative: their strategies carry settings the harness
applies (autocast, where pixels are prepared), so their protocols are attributes. A loader strategy
builds the rank's loader itself (``Loader.pipeline``) from what the harness hands it
(``LoaderInputs``).

Every member a harness uses is declared here. Optional capabilities have a default implementation
in the axis's small base class (``StorageBase``, ``CacheBase``, ``BatchingBase``, ``SamplerBase``),
so a strategy that subclasses it gets them and the harness never probes with ``getattr``. A
strategy may also satisfy its protocol structurally; :func:`missing` names the members it lacks.
The protocols are ``runtime_checkable``: ``isinstance(obj, Cache)`` checks that every member exists
(not its signature).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from strategies.sample import FIELDS, Sample

# ---- storage: how samples lie on disk and how a batch is read back ----


@runtime_checkable
class Reader(Protocol):
    def __len__(self) -> int: ...

    def read_batch(self, indices: Sequence[int]) -> list[Sample]:
        """Samples for ``indices``, in the given order (duplicates allowed)."""

    def stored_bytes(self) -> list[int]:
        """Bytes each sample occupies on disk (for cost estimates), index-aligned."""

    def close(self) -> None: ...


@runtime_checkable
class Storage(Protocol):
    name: str
    # What the written files depend on besides the dataset, as a directory-name suffix ("" when nothing;
    # hdf5: "-contiguous", "-chunked16-gzip"). Two parameter sets with the same variant share one
    # materialisation; a variant other than the default instance's gets its own directory.
    variant: str

    def write(self, samples: Iterable[Sample], path: Path, count: int) -> None:
        """Materialise ``count`` samples (streamed, bounded memory) under ``path``."""

    def open(self, path: Path, fields: Sequence[str] = FIELDS) -> Reader: ...

    def files(self, path: Path) -> list[Path]:
        """The data files of a materialisation (for page-cache control, sizes)."""

    def shards(self, path: Path) -> list[range] | None:
        """The materialisation's shards (tar shards, row groups) as contiguous index ranges in
        index order, covering every sample; None when the storage has none (a shard-streaming
        sampler then cuts its own fixed-size ranges)."""


class StorageBase:
    variant = ""

    def shards(self, path: Path) -> list[range] | None:
        return None


# ---- cache: a fetch of a batch of indices, behind an optional cache ----


@runtime_checkable
class Fetch(Protocol):
    """What ``Cache.wrap`` returns: called with a batch of indices, returns the items in that
    order."""

    def __call__(self, indices: Sequence[int]) -> list: ...

    def stats(self) -> dict | None:
        """Hit/miss counters of the cache behind this fetch, or None when there is no cache."""


@runtime_checkable
class Cache(Protocol):
    scope: str  # "worker" (one cache per DataLoader worker) or "shared" (one per rank); "none" for no cache
    level: str  # "stored" (samples as read) or "decoded" (prepared items)

    def wrap(self, fetch: Callable[[list], list], sizeof: Callable[[Any], int]) -> Fetch: ...

    def close(self) -> None:
        """Release what the cache started (a server process); a no-op for most caches."""


class CacheBase:
    scope = "worker"
    level = "stored"

    def close(self) -> None:
        pass


# ---- batching: how the sampler's index stream is cut into batches ----


@runtime_checkable
class Batching(Protocol):
    splits_on_oom: bool  # True: the training step splits a batch that does not fit into micro-batches

    def batch_sampler(self, sampler: Iterable[int], batch_size: int, **context: Any) -> Iterable[list[int]]:
        """The batches of one rank; ``context`` holds batch_cost, budget, sort_key, rank,
        world_size."""

    def observe(self, memory_fraction: float) -> None:
        """The device-memory use (used / capacity; > 1 after an OOM) of the step just taken."""


class BatchingBase:
    splits_on_oom = False

    def observe(self, memory_fraction: float) -> None:
        pass


# ---- sampler: which indices each rank reads, per epoch ----


@runtime_checkable
class EpochSampler(Protocol):
    """What ``Sampler.sampler`` returns: this rank's indices for the current epoch."""

    def __iter__(self) -> Iterator[int]: ...

    def __len__(self) -> int: ...

    def set_epoch(self, epoch: int) -> None: ...


@runtime_checkable
class Sampler(Protocol):
    cost: str  # the per-sample cost the harness passes: "auto" (pixels or bytes by workload) or "bytes"
    # True: ``sampler()`` also takes ``shards=`` (the storage's ``shards(path)``: a list of contiguous
    # ranges, or None when the storage has none) and the harness passes it
    uses_shards: bool

    def sampler(self, size: int, num_replicas: int, rank: int, seed: int, costs: Any,
                batch_size: int) -> EpochSampler: ...


class SamplerBase:
    cost = "auto"
    uses_shards = False


# ---- precision: the arithmetic of the training step ----


@runtime_checkable
class Precision(Protocol):
    autocast_dtype: str | None  # None: fp32 (TF32 where allowed); "float16" or "bfloat16": autocast to it
    grad_scaler: bool  # True: scale the loss (fp16's gradients underflow without it)
    rate: str  # which catalogue rate models the emulated step: "fp32" or "amp"
    tf32: bool  # fp32 matmuls and convolutions may use TF32 tensor cores (Ampere and later)


class PrecisionBase:
    autocast_dtype = None
    grad_scaler = False
    rate = "amp"
    tf32 = False


# ---- preprocess: where decode, resize, flip and normalise run ----


@runtime_checkable
class Preprocess(Protocol):
    where: str  # "host" (loader workers or threads) or "device" (the accelerator)
    flip: bool  # random horizontal flip
    normalise: bool  # on the host: hand over float32 normalised pixels instead of uint8


class PreprocessBase:
    where = "host"
    flip = True
    normalise = False


# ---- loader: what runs the Dataset and the collate between the batch sampler and the step ----


@dataclass(frozen=True)
class LoaderInputs:
    """What the harness hands a loader strategy to build one rank's loader from."""

    # the rank's map-style Dataset: __getitems__(indices) -> items; for_threads() -> the same dataset made safe
    # for a thread pool of this process (a loader that prepares batches in threads calls it)
    dataset: Any
    batch_sampler: Iterable[list[int]]  # the rank's batches of indices, in order
    collate: Callable[[list], dict]  # items -> one batch
    workers: int  # the scenario's [training] workers
    prefetch_factor: int  # the scenario's batches in flight per worker process
    persistent_workers: bool  # the scenario's: worker processes kept across epochs
    pin: bool  # page-locked batches for a GPU (asynchronous copies)
    # the stage timer's hook: seconds of a batch's hand-over done by the loader (its pinning) added to the
    # batch's `send` stage
    note_send: Callable[[dict, float], None] = lambda batch, seconds: None


@runtime_checkable
class Loader(Protocol):
    kind: str  # the strategy's name: "workers" (DataLoader worker processes), "threads", "nodes", "spdl"
    threads: int  # threads of the pool (0: the scenario's workers, at least 1); unused by "workers"
    prefetch: int  # batches in flight per thread; unused by "workers" (the scenario's prefetch_factor)
    side_stream: bool  # copy the next batch to the device on a side CUDA stream (no-op without CUDA)
    # True: batches are prepared in threads of the rank process; the pipeline's ``cpu_s`` is their CPU seconds
    # so far (each thread's clock around its batches), reported as the loader's
    in_process: bool

    def pipeline(self, inputs: LoaderInputs) -> Iterable[dict]:
        """The rank's loader: every batch of ``inputs.batch_sampler`` once, in its order, each the
        collate of the dataset's ``__getitems__``; ``len()`` is the batch sampler's."""


class LoaderBase:
    kind = "workers"
    threads = 0
    prefetch = 2
    side_stream = False
    in_process = False


PROTOCOLS: dict[str, type] = {"storage": Storage, "cache": Cache, "batching": Batching, "sampler": Sampler,
                              "precision": Precision, "preprocess": Preprocess, "loader": Loader}


def members(protocol: type) -> list[str]:
    """The declared members of a protocol: its annotated attributes and its methods."""
    names = set(getattr(protocol, "__annotations__", {}))
    names |= {k for k, v in vars(protocol).items()
              if callable(v) and (not k.startswith("_") or k in ("__len__", "__iter__", "__call__"))}
    return sorted(names)


def missing(obj: Any, protocol: type) -> list[str]:
    """The members of ``protocol`` that ``obj`` lacks."""
    return [m for m in members(protocol) if not hasattr(obj, m)]
