"""What one rank reports of one cell: `RankRecord` (gathered to rank 0 with
torch.distributed.gather_object, so it pickles; written as one of `ranks` in cells.jsonl; a
JsonRecord, harness.measure.jsonrecord) and the five parts a rank's step is accounted into
(`PARTS`).

docs/results-format.md lists every key ("Keys of a rank's record").
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from harness.measure.jsonrecord import JsonRecord

# --- the five parts of a step -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Part:
    """One of the five parts a rank's step is accounted into."""

    name: str  # its per-step list in a rank's record
    figure: str  # the cell's figure: % of each rank's window, mean over ranks
    column: str  # its table column
    modelled: bool  # depends on the emulated accelerator's model (its column is marked on an emulated run)
    label: str  # its plot legend
    colour: str  # its plot colour


# in the order a step's time passes (a step is their sum, added in this order)
PARTS = (Part("wait", "stall_mean_pct", "stall %", False, "stall (waiting for data)", "#d62728"),
         Part("h2d", "h2d_pct", "h2d %", False, "host-to-device", "#ff7f0e"),
         Part("peer_wait", "peer_wait_pct", "peer wait %", True, "waiting for other ranks", "#9edae5"),
         Part("device", "au_pct", "AU %", True, "device busy (AU)", "#1f77b4"),
         Part("overhead", "overhead_pct", "overhead %", True, "host overhead", "#7f7f7f"))
PART_NAMES = tuple(p.name for p in PARTS)
# the order the tables and plots show them in: the device beside the two parts that feed it
SHOWN_PARTS = tuple(next(p for p in PARTS if p.name == name)
                    for name in ("wait", "h2d", "device", "peer_wait", "overhead"))


# --- the loader's stages ----------------------------------------------------------------------------------

# the loader's stages, in the order a sample passes them (harness.train.stagetimer times them)
STAGES = ("read", "cache", "decode", "transform", "collate", "send", "queue", "receive")
# where they run: in the loader (a worker process, a loader thread) or in the rank process
RANK_STAGES = ("receive",)
LOADER_STAGES = tuple(s for s in STAGES if s not in RANK_STAGES)


def window_stages(log, batch_sizes: list[int]) -> dict | None:
    """A rank's `stages` figure: the summed stage accounts of its window's batches, from the log of
    every batch it handed to training (harness.train.batches.StageLog; the window's batches are the
    last ones, one per measured step that was not a shadow step). None without a log or without
    accounts."""
    batches = sum(1 for n in batch_sizes if n > 0)
    if log is None or not batches:
        return None
    accounts = log.last(batches)
    sizes = log.sizes[len(log.sizes) - len(accounts):]
    timed = [(a, n) for a, n in zip(accounts, sizes) if a]
    if not timed:
        return None
    seconds = {stage: round(sum(a.get(stage, 0.0) for a, _ in timed), 6) for stage in STAGES}
    return {"s": seconds, "samples": int(sum(n for _, n in timed)), "batches": len(timed),
            "processes": len({a.get("pid") for a, _ in timed})}


# --- a rank's record --------------------------------------------------------------------------------------

@dataclass
class RankCache(JsonRecord):
    """A rank's cache statistics over the window (harness.measure.steprecorder.CacheTally), all its
    readers."""

    hits: float = 0.0
    misses: float = 0.0
    evictions: float = 0.0
    resident_bytes: float = 0.0  # held at the window's end
    processes: int = 0  # reading processes that reported (workers or a shared cache's server)
    scope: str | None = None  # "worker" or "shared"


@dataclass
class Nvml(JsonRecord):
    """NVML's sampled utilisation of a real GPU over the window
    (harness.measure.telemetry.NvmlSampler)."""

    nvml_util_mean_pct: float | None = None
    nvml_util_max_pct: float | None = None
    nvml_samples: int = 0
    nvml_interval_s: float | None = None


@dataclass
class Phase(JsonRecord):
    """One phase of a --decompose cell on this rank: its measured window."""

    window_s: float = 0.0
    steps: int = 0
    samples: int = 0
    error: str | None = None


@dataclass
class RankRecord(JsonRecord):
    """One rank's record of one cell. Per-step lists hold one value per measured step (s, rounded
    to microseconds); `step` is the sum of the five parts (PARTS). `consumed` (the indices read per
    epoch, warm-up included, for the coverage check) crosses to rank 0 but is never written.
    `stages` (the loader's stages over the window, window_stages) is taken from the stage log
    `consumed` carries when the record is built, unless given."""

    LOCAL: ClassVar[tuple[str, ...]] = ("consumed", "window_end_at")
    OPTIONAL: ClassVar[tuple[str, ...]] = ("phases", "stages", "kernel_busy_s", "kernel_span_s", "launch",
                                           "epoch_starts", "reference", "rank_main_cpu_s")
    NESTED: ClassVar[dict[str, type[JsonRecord]]] = {"cache": RankCache, "nvml": Nvml}

    rank: int = 0
    wait: list[float] = field(default_factory=list)
    h2d: list[float] = field(default_factory=list)
    peer_wait: list[float] = field(default_factory=list)
    device: list[float] = field(default_factory=list)
    overhead: list[float] = field(default_factory=list)
    padded: list[float] = field(default_factory=list)  # the part of device the emulated device slept through
    step: list[float] = field(default_factory=list)
    cost: list[float] = field(default_factory=list)  # the summed sampler cost of each step's batch
    # per step, the host's own time from the agreement's end to the step's last launch (on CUDA the harness's
    # Python, DDP's hooks and the launches beside the event-timed device); None where not recorded
    launch: list[float] | None = None
    batch_sizes: list[int] = field(default_factory=list)  # 0 on shadow steps
    # the window's steps (indices into the lists above) whose wait began a new epoch (its iterator, its
    # first batch); None where not recorded
    epoch_starts: list[int] | None = None
    samples: int = 0
    padded_pixels: int = 0
    real_pixels: int = 0
    nbytes: int = 0  # bytes the readers delivered
    steps: int = 0
    window_s: float = 0.0
    host_pss_peak: int = 0
    host_rss_peak: int = 0
    memory_samples: int = 0
    disk_read_bytes: int = 0
    loader_cpu_s: float = 0.0
    loader_thread_cpu_s: float = 0.0
    rank_cpu_s: float = 0.0
    rank_main_cpu_s: float | None = None  # of rank_cpu_s, the main thread's (None where not recorded)
    device_peak_bytes: int = 0
    device_capacity_bytes: int = 0
    overruns: int = 0
    oom_events: int = 0
    shadow_steps: int = 0
    cache: RankCache | None = None
    error: str | None = None
    nvml: Nvml | None = None
    completed_epochs: int = 0
    workers: int = 0
    loader: str = ""  # "processes" or "threads"
    model: str = ""
    precision: str = ""
    preprocess: str = ""  # "host" or "device"
    page_cache: dict | None = None  # harness.data.pagecache.prepare's account, this rank's view
    phases: dict[str, Phase] | None = None  # with --decompose: compute, warm, cold
    param_digest: str = ""
    setup_s: dict[str, float] = field(default_factory=dict)  # the visit's time outside the window, per phase
    # --profile on a GPU: over the profiled steps, the time some kernel ran (the union of the kernels) and the
    # steps' span (harness.measure.profiling.kernel_busy); None where not profiled or no kernel ran
    kernel_busy_s: float | None = None
    kernel_span_s: float | None = None
    # the loader's stages over the window: {"s": {stage: CPU seconds}, "samples", "batches", "processes"}
    stages: dict | None = None
    # the fixed reference work timed in the rank right after its window (harness.measure.reference):
    # {"decode_s", "rank_s": thread CPU seconds per piece, "readings", "version"}; None where not taken
    reference: dict | None = None
    consumed: dict[int, list[int]] = field(default_factory=dict)
    # the window's end as a perf_counter stamp (one clock for the machine's processes): crosses to rank 0 for
    # the remote counters' window (harness.measure.remotecounters.visit_window), never written
    window_end_at: float | None = None

    def __post_init__(self) -> None:
        log = getattr(self.consumed, "stages", None)  # harness.train.batches.ConsumedIndices
        if log is not None:
            if self.stages is None:
                self.stages = window_stages(log, self.batch_sizes)
            self.consumed = dict(self.consumed)  # the log stays in the rank

    @classmethod
    def decode(cls, key: str, value: Any) -> Any:
        if key == "phases" and isinstance(value, dict):
            return {name: Phase.from_json(p) for name, p in value.items()}
        return super().decode(key, value)

    def phase_summary(self) -> Phase:
        return Phase(window_s=self.window_s, steps=self.steps, samples=self.samples, error=self.error)
