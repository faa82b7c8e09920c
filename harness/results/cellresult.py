"""One cell's result, one repeat: the record of one line of cells.jsonl (CellResult, its Figures),
read through the file's versions (harness.results.cellsversions) and completed in memory, and the
line written after each cell.

A line read is written back as it was read: keys this version does not know are kept in `extra`,
and what is filled in on read (`upgrade`) is never written. docs/results-format.md lists every key.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import ClassVar

from harness.measure.jsonrecord import JsonRecord
from harness.measure.rankrecord import RankRecord
from harness.results import cellorder, metrics
from harness.results.cellparts import CacheFigures, Coverage, Decomposition, OrderQuality, PageCache
from harness.results.cellsversions import CELLS, NO_HINT, SCHEMA_VERSION


@dataclass
class Figures(JsonRecord):
    """The figures of one cell (units in the names: _ms, _pct, _mb, _gb, _s). Every field is
    optional: a cell that took no step has only `ranks` and `window_steps`. Built in code, it
    writes the figures that are not None; read from a line, the ones it read (nulls included)."""

    NON_NEGATIVE: ClassVar[tuple[str, ...]] = (  # checked on read (jsonrecord.check_shape)
        "ranks", "window_steps", "window_s", "samples", "throughput", "step_p50_ms", "step_p95_ms", "step_p99_ms",
        "device_samples_per_s", "loader_cpu_s_per_sample", "rank_cpu_s_per_sample", "cores_to_feed",
        "host_pss_peak_mb", "host_pss_total_mb", "host_rss_peak_mb", "device_peak_gb", "read_mb_s",
        "mean_batch", "max_batch")

    # the window and its rate
    ranks: int | None = None
    window_steps: int | None = None
    window_s: float | None = None
    samples: int | None = None
    throughput: float | None = None
    step_p50_ms: float | None = None
    step_p95_ms: float | None = None
    step_p99_ms: float | None = None
    throughput_ci: list[float] | None = None  # [low, high] within the run (batch means)
    throughput_ci_label: str | None = None  # what the interval is: level, method, n
    # the time split (the five parts of a rank's window) and the ranks' balance
    stall_mean_pct: float | None = None  # the five parts of a rank's window, mean over ranks; they sum to 100
    h2d_pct: float | None = None
    peer_wait_pct: float | None = None
    au_pct: float | None = None  # device busy / wall, nothing else
    overhead_pct: float | None = None
    stall_max_pct: float | None = None
    step_imbalance: float | None = None
    window_imbalance: float | None = None
    cost_imbalance: float | None = None
    # CPU and device costs per sample
    loader_cpu_s_per_sample: float | None = None
    rank_cpu_s_per_sample: float | None = None
    device_samples_per_s: float | None = None  # per rank, when never starved (modelled on an emulated device)
    cores_to_feed: float | None = None
    decode_limit_ratio: float | None = None  # the loader's CPU per sample / its decode stage's (1: decode alone)
    # the gates' figures (harness.results.metrics.against_reference): CPU costs over work timed in the same visit
    loader_vs_decode: float | None = None  # the loader's timed stages / its decode stage
    decode_vs_reference: float | None = None  # the decode stage per sample / the reference decode
    rank_vs_reference: float | None = None  # the rank's main thread's CPU per sample / the reference step
    # a real GPU's own readings
    kernel_au_pct: float | None = None  # --profile on a GPU: kernels running over the profiled steps' span
    launch_ms_p50: float | None = None  # median host time per step from the agreement to the last launch
    imbalance: float | None = None  # schema 1 only: the window-total figure, now window_imbalance
    # memory
    host_pss_peak_mb: float | None = None
    host_pss_total_mb: float | None = None
    host_rss_peak_mb: float | None = None
    device_peak_gb: float | None = None
    # reads
    read_mb_s: float | None = None
    logical_read_mb: float | None = None
    disk_read_mb: float | None = None
    disk_read_mb_s: float | None = None
    read_amplification: float | None = None  # disk_read_mb / logical_read_mb (derived on read for older lines)
    # batches, faults and overruns
    padding_waste_pct: float | None = None
    mean_batch: float | None = None
    max_batch: int | None = None
    oom_events: int | None = None
    shadow_steps: int | None = None
    nvml_util_pct: float | None = None
    gpu_compute_au_pct: float | None = None  # schema 1 only: on CUDA, au_pct is now the CUDA-event time
    overrun_steps: int | None = None
    overrun_pct: float | None = None
    # the visit and the host around it
    setup_s: float | None = None  # the visit's time outside its measured window (elapsed_s - window_s)
    window_share_pct: float | None = None  # the measured window / the visit's elapsed time, %
    other_cpu_pct: float | None = None  # CPU used on the host by processes outside the run, % of the host
    steal_pct: float | None = None  # CPU time the hypervisor gave to other guests, % of the host
    vs_probe: float | None = None  # derived when reporting: throughput / the repeat's ideal loader (probe.jsonl)
    # a remote storage's figures over the measured window (harness.measure.remotecounters; absent for local data)
    remote_requests_per_sample: float | None = None
    remote_mb_per_sample: float | None = None
    remote_lists_per_sample: float | None = None
    remote_latency_p50_ms: float | None = None
    remote_latency_p99_ms: float | None = None
    remote_wait_ms_per_sample: float | None = None  # a reading worker's wait on the store per sample it read
    disk_hit_pct: float | None = None  # the disk cache tier's hits / lookups in the window
    remote_retries: int | None = None
    # how random the order was over the window, beside the ideal shuffle's mean and sd (harness.results.cellorder):
    # units (shards, chunks, row groups, blocks) met per batch, Spearman's rho of storage against epoch position,
    # the batches' TV distance from the dataset's class mix (data with classes only); the ratios are 1 for a shuffle
    order_units_per_batch: float | None = None
    order_units_ideal: float | None = None
    order_units_ideal_sd: float | None = None
    order_units_ratio: float | None = None
    order_position_rho: float | None = None
    order_position_ideal_sd: float | None = None
    order_position_mixing: float | None = None
    order_label_tv: float | None = None
    order_label_tv_ideal: float | None = None
    order_label_tv_ideal_sd: float | None = None
    order_label_ratio: float | None = None
    # what the order did to training (data with classes: harness.results.ordertraining): a softmax classifier
    # trained for the window's steps with the order and with the ideal shuffle, the mean held-out loss over the
    # seeds, the loss ratio (order / shuffle) and its 95% interval (1 inside: trains as a shuffle)
    order_train_steps: int | None = None
    order_train_seeds: int | None = None
    order_train_loss: float | None = None
    order_train_loss_shuffle: float | None = None
    order_train_ratio: float | None = None
    order_train_ratio_low: float | None = None
    order_train_ratio_high: float | None = None
    order_train_accuracy: float | None = None
    order_train_accuracy_shuffle: float | None = None

    @classmethod
    def known(cls) -> tuple[str, ...]:
        return cls.json_keys()

    def writes(self, key: str) -> bool:
        return key in self._keys if self._keys is not None else getattr(self, key) is not None

    def get(self, key: str, default=None):
        """A known figure by name; `default` when absent or null. A name that is not a known figure
        is a KeyError (figures this version does not know are in `extra`)."""
        if key not in self.known():
            raise KeyError(f"{key!r} is not a figure (harness.results.cellresult.Figures)")
        value = getattr(self, key)
        return default if value is None else value

    def replace(self, **changes) -> Figures:
        """A copy with figures set (written by to_json); names that are not known figures go to
        `extra`."""
        known = {k: v for k, v in changes.items() if k in self.known()}
        extra = {**self.extra, **{k: v for k, v in changes.items() if k not in known}}
        keys = None if self._keys is None else self._keys | set(known)
        return dataclasses.replace(self, **known, extra=extra, _keys=keys)

    def derive(self, **changes) -> Figures:
        """A copy with known figures filled in memory only (`upgrade`): to_json still writes what
        was read."""
        return dataclasses.replace(self, **changes)

    def values(self) -> dict:
        """Every figure this holds, by name: what to_json writes, and the figures derived in
        memory."""
        out = {k: getattr(self, k) for k in self.known() if self.writes(k) or getattr(self, k) is not None}
        out.update(self.extra)
        return out

    @property
    def measured(self) -> bool:
        return self.throughput is not None


@dataclass
class CellResult(JsonRecord):
    """One cell, one repeat: one line of cells.jsonl."""

    KEYS: ClassVar[tuple[str, ...]] = (
        "schema", "scenario", "cell", "strategies", "params", "names", "device", "emulated", "workload",
        "batch_size", "world_size", "repeat", "elapsed_s", "figures", "coverage", "cache", "page_cache",
        "decomposition", "error", "ranks", "advice", "order")
    OPTIONAL: ClassVar[tuple[str, ...]] = ("order",)
    NON_NEGATIVE: ClassVar[tuple[str, ...]] = ("repeat", "elapsed_s", "batch_size", "world_size")
    NESTED: ClassVar[dict] = {"figures": Figures, "coverage": Coverage, "cache": CacheFigures,
                              "page_cache": PageCache, "decomposition": Decomposition, "ranks": RankRecord,
                              "order": OrderQuality}

    cell: str  # the cell's id: "storage=raw,cache=none,batching=fixed,sampler=default"
    scenario: str = ""
    strategies: dict[str, str] = field(default_factory=dict)  # axis -> label, name(param=value,...)
    params: dict[str, dict] = field(default_factory=dict)  # axis -> the strategy's parameters
    names: dict[str, str] = field(default_factory=dict)  # axis -> the strategy's name, without parameters
    device: str = ""
    emulated: bool = False
    workload: str | None = None
    batch_size: int | None = None
    world_size: int | None = None
    repeat: int = 0
    elapsed_s: float | None = None
    figures: Figures = field(default_factory=Figures)
    coverage: Coverage | None = None
    cache: CacheFigures | None = None
    page_cache: PageCache | None = None
    decomposition: Decomposition | None = None
    error: str | None = None
    ranks: list[RankRecord] = field(default_factory=list)
    # the access hint the storage's readers gave the kernel (strategies.storage.advice): random, sequential,
    # normal; None for a storage without one (a plugin's). Lines written before hints existed: "normal".
    advice: str | None = None
    order: OrderQuality | None = None  # the order's figures per rank (absent: not recorded, as in older lines)
    schema: int = SCHEMA_VERSION
    # figures whose value keeps the meaning of the older schema the line was written in (`upgrade`; not written)
    legacy_figures: frozenset[str] = frozenset()

    @classmethod
    def json_keys(cls) -> tuple[str, ...]:
        return cls.KEYS

    @classmethod
    def from_json(cls, obj: dict, where: str | None = None) -> CellResult:
        """A line of cells.jsonl (`where`: its place, "path:line", for the errors), read through
        CELLS (the steps from an older version) and completed in memory (`upgrade`); keys not in
        KEYS go to `extra`. A line of a newer schema, a damaged one, or no line at all, is a
        ValueError (a harness.results.fileformat.ResultsError where it is the file's)."""
        if not isinstance(obj, dict) or "cell" not in obj:
            raise ValueError(f"{where + ': ' if where else ''}not a cells.jsonl line (an object with a \"cell\" "
                             f"key): {str(obj)[:80]}")
        return upgrade(CELLS.load(obj, where or f"cell {obj['cell']}", cls._read))

    @classmethod
    def _read(cls, obj: dict) -> CellResult:
        return _normalised(super().from_json(obj))

    @classmethod
    def of_cell(cls, scenario, cell, device: str, emulated: bool, world_size: int, repeat: int = 0,
                **rest) -> CellResult:
        """A new result's identity: the cell (a harness.config.matrix.Cell) of the scenario (a
        harness.config.scenario.Scenario), where it ran and which repeat it is; `rest` sets the
        other fields. Every line written is built here (cell_line,
        harness.run.supervisor.failed_line)."""
        return cls(cell=cell.id, scenario=scenario.name, strategies=cell.strategies(),
                   params={c.axis: dict(c.params) for c in cell.choices},
                   names={c.axis: c.name for c in cell.choices}, device=device, emulated=emulated,
                   workload=scenario.training.workload, batch_size=scenario.training.batch_size,
                   world_size=world_size, repeat=repeat, advice=cell.advice, **rest)

    @property
    def measured(self) -> bool:
        """Not errored and has a throughput."""
        return not self.error and self.figures.measured

    @property
    def contract_ok(self) -> bool:
        """The sampler contract held (True when it was not checked)."""
        return self.coverage is None or self.coverage.ok

    def name(self, axis: str) -> str:
        """The strategy's name on an axis, without parameters ("" when the line has no such
        axis)."""
        return self.names.get(axis, self.strategies.get(axis, ""))

    def label(self, axis: str) -> str:
        """The strategy's label on an axis: its name with its parameters ("" when absent)."""
        return self.strategies.get(axis, "")


def duplicated_visit(results: list[CellResult]) -> CellResult | None:
    """The first result whose cell and repeat an earlier result already has (two writers of one run
    directory append the same visit twice), else None."""
    seen: set[tuple[str, int]] = set()
    for result in results:
        if (result.cell, result.repeat) in seen:
            return result
        seen.add((result.cell, result.repeat))
    return None


RECORDED_STEPS = " (from the recorded steps)"  # the label's suffix of an interval derived on read
UNKNOWN_INTERVAL = "interval, method unknown"


def _normalised(result: CellResult) -> CellResult:
    """A line as read, in the shapes the current model holds: `schema` (absent: version 1),
    `repeat` (0), `names` (derived from the labels and params), and empty objects and lists where a
    line has nulls."""
    read = result._keys or frozenset()
    if "schema" not in read:
        result.schema = 1
    result.strategies = dict(result.strategies or {})
    result.params = {a: dict(p or {}) for a, p in (result.params or {}).items()}
    result.names = dict(result.names or {}) or {a: _name_of(label, result.params.get(a))
                                                for a, label in result.strategies.items()}
    result.emulated = bool(result.emulated)
    result.repeat = int(result.repeat or 0)
    result.ranks = list(result.ranks or [])
    if result.figures is None:
        result.figures = Figures.from_json({})
    return result


def upgrade(result: CellResult) -> CellResult:
    """A line read through CELLS, completed in memory with what lines of older harnesses of its
    version lack; what is filled in here is never written back (to_json writes the keys the line
    had):

    - a measured line without `throughput_ci` (written before the interval was): batch means over
      the ranks' recorded steps (metrics.throughput_interval), labelled so; an interval without its
      label: UNKNOWN_INTERVAL; without `read_amplification`: disk_read_mb / logical_read_mb;
      without `advice` (written before the readers gave access hints): NO_HINT."""
    read = result._keys or frozenset()
    if "advice" not in read:  # written before the readers gave access hints: the kernel's defaults
        result.advice = NO_HINT
    f = result.figures
    if f.read_amplification is None and f.disk_read_mb is not None:
        f = f.derive(**metrics.read_amplification(f.disk_read_mb, f.logical_read_mb))
    if f.throughput_ci is None and f.measured and not result.error:
        ci = metrics.throughput_interval(result.ranks)
        if ci:
            f = f.derive(throughput_ci=ci["throughput_ci"],
                         throughput_ci_label=ci["throughput_ci_label"] + RECORDED_STEPS)
    elif f.throughput_ci is not None and not f.throughput_ci_label:
        f = f.derive(throughput_ci_label=UNKNOWN_INTERVAL)
    result.figures = f
    return result


def _name_of(label: str, params: dict | None) -> str:
    """A strategy's name from its label, for lines written before names were stored: the label is
    the name followed by "(k=v,...)" of its parameters
    (harness.config.scenario.StrategyChoice.label)."""
    if not params:
        return label
    suffix = "(" + ",".join(f"{k}={v}" for k, v in params.items()) + ")"
    return label[:-len(suffix)] if label.endswith(suffix) else label.partition("(")[0]


def cell_line(scenario, cell, device_name: str, emulated: bool, records: list[RankRecord], elapsed: float,
              repeat: int = 0, outside: tuple[float | None, float | None] = (None, None),
              remote: dict | None = None) -> dict:
    """The JSON object appended to cells.jsonl for one cell (a harness.config.scenario.Scenario and
    a harness.config.matrix.Cell, the per-rank records gathered on rank 0, the cell's wall time in
    seconds, the repeat it belongs to; `remote`: a remote storage's figures over the window,
    harness.measure.remotecounters.of_visit)."""
    errors = sorted({r.error for r in records if r.error})
    page_cache = records[0].page_cache
    order_figures, order = cellorder.of_cell(records, scenario.dataset, cell.id)
    result = CellResult.of_cell(
        scenario, cell, device_name, emulated, world_size=len(records), repeat=repeat,
        elapsed_s=round(elapsed, 3),
        figures=with_visit_figures(Figures.from_json(metrics.cell_figures(records)), elapsed, outside).replace(
            **(remote or {}), **order_figures),
        coverage=metrics.coverage(records, scenario.dataset.samples),
        cache=metrics.cache_figures(records),
        page_cache=PageCache.from_json(page_cache) if page_cache is not None else None,
        decomposition=metrics.decomposition(records),
        error="; ".join(errors) or None,
        ranks=list(records),
        order=order,
    )
    return result.to_json()


def with_visit_figures(figures: Figures, elapsed: float, outside: tuple[float | None, float | None]) -> Figures:
    """The figures plus how much of the visit its measured window was (`window_s`: the slowest
    rank's window) and the host's outside load during it (harness.measure.hostload), where they
    were measured."""
    extra = {}
    window = figures.window_s or 0.0
    if elapsed > 0 and window > 0:
        extra.update(setup_s=round(max(0.0, elapsed - window), 3), window_share_pct=round(100 * window / elapsed, 2))
    if outside[0] is not None:
        extra.update(other_cpu_pct=outside[0], steal_pct=outside[1])
    return figures.replace(**extra)


def summary_text(line: dict) -> str:
    """The one-line progress summary of a cells.jsonl line."""
    r = CellResult.from_json(line)
    if r.error:
        return f"    {r.error} ({r.elapsed_s or 0:.1f} s)"
    f = r.figures
    return (f"    {f.throughput or 0:.0f} samples/s, stall {f.stall_mean_pct or 0:.0f}%, "
            f"AU {f.au_pct or 0:.0f}% ({r.elapsed_s or 0:.1f} s)")
