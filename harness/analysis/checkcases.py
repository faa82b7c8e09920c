"""Pure: the configurations --check-predictions measures (`CheckCase`), the predictions it scores
(`Pairing`: a case predicted from a calibration's measured costs), and each prediction: the costs a case
changes are scaled by what the command measured beside the cells (the read stage per storage, the decode stage
per decoder and image size, the pixels per image), and the case's target is this host with the CPUs the case's
launch may use (its allowance, or the one CPU a confined case runs on) and the disk's measured rate and
latency for a cold page cache. Nothing is fitted to a measured samples/s: the headline is this absolute
model. Beside it, labelled, a shared-host correction takes from the allowance the CPU that processes outside
the run used during the case's own visits (measured, not fitted). docs/prediction.md.

The check writes one row per case to predictions.jsonl, a file of format PREDICTIONS (its version and history
below; harness.results.fileformat reads and writes it).
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field, replace

from harness.analysis import rankwait
from harness.analysis.stages import requests_per_sample
from harness.analysis.targetmodel import Costs, Prediction, predict
from harness.config.accelerators import Accelerator
from harness.config.target import Target
from harness.results.fileformat import FileFormat

# predictions.jsonl's format version (written under "schema" in each line), and what each version is:
PREDICTIONS_VERSION = 2
PREDICTIONS_HISTORY = {
    1: "one row per configuration: `config`, `settings`, `predicted` (the CPU the run got fitted to the "
       "calibration's measured samples/s), `measured`, `error_pct`, `binds`, `predicted_idle_host`, "
       "`run_cores`, `visits`, `spread_pct`, `loader_ms`, `rank_ms`, `note`; the `schema` key added within "
       "version 1 (a line without it is version 1)",
    2: "one row per prediction scored: `config`, `source` (the calibration it is predicted from), `settings`, "
       "`predicted` (the absolute model: nothing fitted), `predicted_shared` (less the outside load measured "
       "in the case's visits), `measured`, `error_pct` and `error_shared_pct`, `flag` (calibration, copy or "
       "empty) and `scored`, `binds`, `visits`, `spread_pct`, `loader_ms`, `rank_ms`, `note`; "
       "`predicted_idle_host` is `predicted` now, and version 1's fitted `predicted` reads as "
       "`predicted_fitted`. Added within version 2: `outside_pct` (the outside load the case's visits saw, "
       "their mean); the check's headline became `predicted_shared` (issue 38), the keys kept their meaning; "
       "`interval` (the headline's 90% interval, [low, high], or null where no spread was measured) and "
       "`inside` (the measurement fell in it); `flag` calibration also marks the case at one rank more (the "
       "ranks' wait is measured in it)",
}


def _v1_to_v2(row: dict) -> dict:
    """A version 1 row as version 2 reads it: the idle-host prediction is the headline."""
    out = {k: v for k, v in row.items() if k not in ("predicted_idle_host", "run_cores")}
    flag = "calibration" if row.get("config") == "calibration" else ""
    absolute = row.get("predicted_idle_host")
    return {**out, "source": "calibration", "predicted": absolute, "predicted_fitted": row.get("predicted"),
            "predicted_shared": None, "error_shared_pct": None, "flag": flag, "scored": not flag,
            "error_pct": round(error_pct(absolute, row.get("measured")), 1)
            if absolute is not None and row.get("measured") else None}


PREDICTIONS = FileFormat("predictions.jsonl", PREDICTIONS_VERSION, PREDICTIONS_HISTORY, {1: _v1_to_v2})
PIXEL_STAGES = ("collate", "send")  # stages whose work scales with the pixels of an image


@dataclass(frozen=True)
class CheckCase:
    name: str
    world_size: int = 1
    workers: int = 1
    batch_size: int = 32
    image_size: int = 160
    storage: str = "raw"
    decoder: str = "pil"
    cache_state: str = "warm"
    cpus: int = 0  # the CPUs its launch is confined to (0: the run's whole allowance)

    @property
    def group(self) -> tuple:
        """Cases that differ only in storage run as cells of one launch."""
        return (self.world_size, self.workers, self.batch_size, self.image_size, self.decoder, self.cache_state,
                self.cpus)

    def config(self) -> dict:
        out = {"world_size": self.world_size, "workers": self.workers, "batch_size": self.batch_size,
               "image_size": self.image_size, "storage": self.storage, "decoder": self.decoder,
               "page_cache": self.cache_state}
        return {**out, "cpus": self.cpus} if self.cpus else out


@dataclass(frozen=True)
class Pairing:
    """One scored prediction: the measured case `case` predicted from the costs of the case `source`."""

    name: str
    source: str
    case: str


ONE_CPU = "calibration on 1 CPU"


def cases(base: CheckCase, other_size: int, other_decoder: str | None = None,
          allowance: int = 1) -> list[CheckCase]:
    """The calibration (first) and the cases, each changing one thing or two (other_decoder: the decoder the
    decoder case switches to; None: no decoder case): across the workers (one more, none: the rank loads
    inline), the ranks (one more: the ranks' wait is measured there; two more; four times), the batch (twice,
    half), the image size (`other_size`, and x0.7), the storages, the page cache (cold in each storage), the
    decoder; with an allowance of 2 CPUs or more, the calibration's configuration
    confined to 1 CPU, the other calibration of the machine-boundary pairings."""
    half, small = max(1, base.batch_size // 2), max(32, base.image_size * 7 // 10 // 16 * 16)
    out = [replace(base, name="calibration"),
           replace(base, name=f"workers {base.workers} -> {base.workers + 1}", workers=base.workers + 1),
           replace(base, name=f"workers {base.workers} -> 0 (inline)", workers=0),
           replace(base, name=f"ranks {base.world_size} -> {base.world_size + 1}", world_size=base.world_size + 1),
           replace(base, name=f"ranks {base.world_size} -> {base.world_size + 2}", world_size=base.world_size + 2),
           replace(base, name=f"ranks {base.world_size} -> {4 * base.world_size}", world_size=4 * base.world_size),
           replace(base, name=f"batch {base.batch_size} -> {2 * base.batch_size}", batch_size=2 * base.batch_size),
           replace(base, name=f"batch {base.batch_size} -> {half}", batch_size=half),
           replace(base, name=f"image size {base.image_size} -> {other_size}", image_size=other_size),
           replace(base, name=f"image size {base.image_size} -> {small}", image_size=small),
           replace(base, name="storage mmap", storage="mmap"),
           replace(base, name="storage hdf5", storage="hdf5"),
           replace(base, name="page cache cold", cache_state="cold"),
           replace(base, name="page cache cold, storage mmap", storage="mmap", cache_state="cold"),
           replace(base, name="page cache cold, storage hdf5", storage="hdf5", cache_state="cold")]
    if other_decoder and other_decoder != base.decoder:
        out.insert(12, replace(base, name=f"decoder {base.decoder} -> {other_decoder}", decoder=other_decoder))
    if allowance >= 2:
        out.append(replace(base, name=ONE_CPU, cpus=1))
    return out


def pairings(all_cases: list[CheckCase], allowance: int) -> list[Pairing]:
    """What the check scores: each case from the calibration (the calibration itself first), and across the
    machine boundary: the 1-CPU launch from the calibration, and from the 1-CPU calibration the calibration's
    configuration, the workers case and the ranks case on the whole allowance."""
    names = {c.name for c in all_cases}
    out = [Pairing(c.name if c.name != ONE_CPU else f"1 CPU (from {allowance})", "calibration", c.name)
           for c in all_cases]
    if ONE_CPU in names:
        out.append(Pairing(f"{allowance} CPUs (from 1)", ONE_CPU, "calibration"))
        out += [Pairing(f"{c.name} on {allowance} CPUs (from 1)", ONE_CPU, c.name) for c in all_cases
                if c.name.startswith(("workers ", "ranks "))]
    return out


def ranks_calibration(all_cases: list[CheckCase]) -> str | None:
    """The case that is the calibration at one rank more (the ranks' wait is measured in it: its own rows
    are repeats, not predictions); None where the cases have none."""
    base = all_cases[0]
    more = replace(base, world_size=base.world_size + 1)
    return next((c.name for c in all_cases if replace(c, name=base.name) == more), None)


@dataclass(frozen=True)
class Bench:
    """What the check measured beside the cells (harness.measure.sidebench, composed by harness.run.calibration)."""

    read_s: dict[str, float]  # storage -> read stage CPU s/sample (warm)
    decode_s: dict[tuple[int, str], float]  # (image size, decoder) -> decode CPU s/image
    area: dict[int, float]  # image size -> mean resized pixels per image
    disk_mb_s: float = 0.0
    disk_latency_ms: float = 0.0
    cold_cpu_s_per_byte: float = 0.0
    cold_cpu_s_per_request: float = 0.0  # measured on small files: used instead of the per-byte figure
    contention: float = 1.0
    storage_iops: float = 0.0  # the store's requests per second (0: unlimited; harness.analysis.remotecheck's)
    # per packed storage, measured by reading it cold: the device requests a cold sample makes (its extra wall
    # over one request's latency) and the extra CPU it costs; a storage without them: the model's defaults
    cold_requests: dict[str, float] = field(default_factory=dict)
    cold_cpu_s: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class RanksWait:
    """The ranks' wait a calibration at 2 or more ranks measured (harness.analysis.rankwait), and the
    dataset's samples per epoch (its epoch starts' law)."""

    wait: rankwait.RankWait
    samples: int


def waits(ranks: RanksWait | None, base: CheckCase, case: CheckCase) -> bool:
    """Whether the ranks' wait applies: measured, a case of 2 ranks or more, predicted from 1 rank."""
    return ranks is not None and case.world_size >= 2 and base.world_size == 1


def case_costs(calib: Costs, base: CheckCase, case: CheckCase, bench: Bench, ranks: RanksWait | None = None) -> Costs:
    """The calibration's costs with what the case changes scaled by the bench's measured ratios (a cold read's
    requests and extra CPU per sample: the storage's measured ones, else its files per sample); with `ranks`
    (the calibration at 1 rank), the rank's CPU at the case's ranks (the collectives' CPU by the ring's messages)."""
    stages = dict(calib.stages)
    if case.storage != base.storage and base.storage in bench.read_s and case.storage in bench.read_s:
        stages["read"] = stages.get("read", 0.0) * bench.read_s[case.storage] / max(bench.read_s[base.storage], 1e-9)
    old, new = (base.image_size, base.decoder), (case.image_size, case.decoder)
    if old != new and old in bench.decode_s and new in bench.decode_s:
        stages["decode"] = stages.get("decode", 0.0) * bench.decode_s[new] / max(bench.decode_s[old], 1e-12)
    pixels = 1.0
    if case.image_size != base.image_size and base.image_size in bench.area and case.image_size in bench.area:
        pixels = bench.area[case.image_size] / bench.area[base.image_size]
        for stage in PIXEL_STAGES:
            stages[stage] = stages.get(stage, 0.0) * pixels
    loader = sum(stages.values()) if stages else calib.loader_s
    requests = calib.requests_per_sample
    if case.storage in bench.cold_requests:
        requests = bench.cold_requests[case.storage]
    elif case.storage != base.storage:
        requests = requests_per_sample(case.storage, calib.workload)
    cold = bench.cold_cpu_s.get(case.storage, bench.cold_cpu_s_per_request * requests if bench.cold_cpu_s_per_request
                                else bench.cold_cpu_s_per_byte * calib.bytes_per_sample)
    rank = rankwait.rank_cpu_s(calib.rank_s, ranks.wait, case.world_size) if waits(ranks, base, case) \
        else calib.rank_s
    return replace(calib, loader_s=loader, rank_s=rank, stages=stages, copy_s=calib.copy_s * pixels,
                   requests_per_sample=requests,
                   padded_pixels_per_sample=calib.padded_pixels_per_sample * pixels, cold_read_extra_s=cold)


def case_target(case: CheckCase, accelerator: Accelerator, cores: float, bench: Bench) -> Target:
    """This host as the case ran on it."""
    return Target(nodes=1, gpus_per_node=case.world_size, cores_per_node=max(0.05, cores),
                  accelerator=accelerator.name, storage_read_mb_s=bench.disk_mb_s,
                  storage_latency_ms=bench.disk_latency_ms, storage_iops=bench.storage_iops,
                  page_cache=case.cache_state, workers_per_rank=case.workers, batch_size=case.batch_size,
                  name="this host")


def predict_case(calib: Costs, base: CheckCase, case: CheckCase, bench: Bench, accelerator: Accelerator,
                 cores: float, outside_pct: float | None = None, ranks: RanksWait | None = None) -> Prediction:
    """The case's prediction on this host with `cores` CPUs (the absolute model: each process may use a
    whole core); with `outside_pct` (the CPU that processes outside the run used during the case's visits,
    % of those CPUs: the shared-host correction), the run gets the rest, and none of its processes more
    than that. With `ranks` (from a calibration at 2 ranks or more; the calibration `calib` at 1 rank), a
    case at 2 ranks or more has the rank's CPU at its size and a step no shorter than the ranks' wait makes
    it (the AU the smaller of the two)."""
    got = cores if outside_pct is None else max(0.05, cores * (1.0 - min(95.0, max(0.0, outside_pct)) / 100.0))
    p = predict(case_costs(calib, base, case, bench, ranks), case_target(case, accelerator, got, bench),
                accelerator, advise=False, share=min(1.0, got))
    if not waits(ranks, base, case):
        return p
    au = rankwait.au_pct(ranks.wait, case.world_size, case.batch_size, ranks.samples)
    if au >= p.au_pct:
        return p
    scale = au / max(p.au_pct, 1e-9)
    return replace(p, au_pct=au, samples_per_s=p.samples_per_s * scale, per_rank=p.per_rank * scale,
                   binds="ranks' wait")


def measured_at(costs: Costs, samples_per_s: float, cpus: float, outside_pct: float) -> Costs:
    """The costs as measured: with the share of the run's CPUs busy that its own CPU (samples/s x the CPU
    per sample) and the outside load made, the load the contention factor is undone at."""
    busy = samples_per_s * (costs.loader_s + costs.rank_s) / cpus + outside_pct / 100.0
    return replace(costs, busy_share=min(1.0, busy))


COPY_PCT = 2.0  # a prediction within this of its calibration's own prediction scores the calibration again


def is_copy(predicted: float, calibration_predicted: float) -> bool:
    """A case the model predicts as its calibration (no cost it changes moves the binding bound): its error
    is the calibration's own again, so it is flagged and left out of the median."""
    return bool(calibration_predicted) and abs(predicted / calibration_predicted - 1.0) * 100.0 < COPY_PCT


def error_pct(predicted: float, measured: float) -> float | None:
    return None if not measured else 100.0 * (predicted - measured) / measured


def summary(errors: list[float]) -> dict:
    """Median and largest absolute error (%) and the cases within 15% (the cases scored: neither a
    calibration nor a copy of one)."""
    errors = [abs(e) for e in errors if e is not None]
    if not errors:
        return {"median_abs_error_pct": None, "max_abs_error_pct": None, "within_15": 0, "cases": 0}
    return {"median_abs_error_pct": statistics.median(errors), "max_abs_error_pct": max(errors),
            "within_15": sum(e <= 15 for e in errors), "cases": len(errors)}
