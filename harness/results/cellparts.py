"""The parts of a cells.jsonl line beside its figures, each a small record that owns its JSON
(harness.measure.jsonrecord.JsonRecord: unknown keys kept, a line read writes back what it read):
`coverage` (Coverage, per epoch EpochCoverage), `cache` (CacheFigures), `page_cache` (PageCache,
its probe read PageCacheCheck), `decomposition` (Decomposition) and `order` (OrderQuality, per rank
RankOrderQuality). docs/results-format.md lists their keys.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from harness.measure.jsonrecord import JsonRecord


@dataclass
class EpochCoverage(JsonRecord):
    """The sampler contract in one epoch, over the indices of all ranks."""

    epoch: int = 0
    complete: bool = False  # every rank finished the epoch
    consumed: int = 0
    unique: int = 0
    duplicates: int = 0
    missing: int | None = None  # None when the epoch is incomplete
    out_of_range: int = 0
    broken: bool = False


@dataclass
class Coverage(JsonRecord):
    """The sampler contract check of a cell (harness.results.metrics.coverage)."""

    NESTED: ClassVar[dict] = {"epochs": EpochCoverage}

    ok: bool = True  # the contract held in every epoch
    padding_allowed: int = 0  # indices torch's DistributedSampler may repeat to even out the ranks
    epochs: list[EpochCoverage] = field(default_factory=list)
    coverage_pct: float | None = None  # of the dataset, in the worst completed epoch; None: none completed
    duplicates: int = 0
    missing: int = 0  # completed epochs only


@dataclass
class CacheFigures(JsonRecord):
    """Cache statistics over the window, summed over all workers of all ranks."""

    hits: float = 0.0
    misses: float = 0.0
    evictions: float = 0.0
    hit_pct: float = 0.0
    resident_mb: float = 0.0  # held at the end, all caches
    caches: int = 0  # cache instances: workers or cache servers
    scope: str | None = None  # "worker" or "shared"


@dataclass
class PageCacheCheck(JsonRecord):
    """The probe read after warming or dropping the page cache
    (harness.data.pagecache.probe_read)."""

    path: str = ""
    bytes: int = 0
    seconds: float = 0.0
    device_bytes: int | None = None  # what the kernel read from the device; None when unknown
    mb_s: float | None = None


@dataclass
class PageCache(JsonRecord):
    """What was done to the page cache before the cell (--cache-state), rank 0's view."""

    OPTIONAL: ClassVar[tuple[str, ...]] = ("bytes", "check", "verified")
    NESTED: ClassVar[dict] = {"check": PageCacheCheck}

    state: str = "as-is"  # as-is, warm, cold, or in-memory (the compute-only phase)
    bytes: int | None = None  # warm: pre-read
    check: PageCacheCheck | None = None  # warm and cold
    verified: bool | None = None  # cold: the probe read came from the device


@dataclass
class Decomposition(JsonRecord):
    """The stall decomposition of a --decompose cell: either `error` alone, or per step of the
    slowest rank (s), their share of the cold step (%) and the phases' throughputs (samples/s)."""

    OPTIONAL: ClassVar[tuple[str, ...]] = (
        "error", "compute_s", "warm_s", "cold_s", "prep_stall_s", "fetch_stall_s", "compute_pct",
        "prep_stall_pct", "fetch_stall_pct", "compute_bound_samples_s", "warm_samples_s", "cold_samples_s")

    error: str | None = None
    compute_s: float | None = None
    warm_s: float | None = None
    cold_s: float | None = None
    prep_stall_s: float | None = None  # warm - compute
    fetch_stall_s: float | None = None  # cold - warm
    compute_pct: float | None = None
    prep_stall_pct: float | None = None
    fetch_stall_pct: float | None = None
    compute_bound_samples_s: float | None = None
    warm_samples_s: float | None = None
    cold_samples_s: float | None = None


@dataclass
class RankOrderQuality(JsonRecord):
    """One rank's order over its measured window, against the ideal shuffle
    (harness.results.orderquality): units met per batch, Spearman's rho of storage position against
    epoch position, the batches' TV distance from the dataset's class mix; each beside the ideal's
    mean and sd (of the mean over the batches)."""

    OPTIONAL: ClassVar[tuple[str, ...]] = ("label_tv", "label_tv_ideal", "label_tv_ideal_sd")

    rank: int = 0
    batches: int = 0
    samples: int = 0
    units_per_batch: float | None = None
    units_ideal: float | None = None
    units_ideal_sd: float | None = None
    position_rho: float | None = None
    position_ideal_sd: float | None = None
    label_tv: float | None = None
    label_tv_ideal: float | None = None
    label_tv_ideal_sd: float | None = None


@dataclass
class OrderQuality(JsonRecord):
    """How random the cell's order was (harness.results.cellorder): what a unit is ("shards": the
    storage's own, or "blocks of 64" positions), the dataset's classes (0: none, no label figures),
    how the ideal's label spread was found, and each rank's figures; the cell's own are `order_*`
    figures."""

    NESTED: ClassVar[dict] = {"ranks": RankOrderQuality}

    unit: str = ""
    units: int = 0  # units in the dataset
    classes: int = 0
    label_spread: str = ""
    ranks: list[RankOrderQuality] = field(default_factory=list)
