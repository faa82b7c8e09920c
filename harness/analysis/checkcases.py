"""Pure: the configurations --check-predictions measures (`CheckCase`), and each one's prediction from the
calibration's measured costs: the costs a case changes are scaled by what the command measured beside the
cells (the read stage per storage, the decode stage per decoder and image size, the pixels per image), and
the case's target is this host as the calibration found it: the CPU the run got there (`run_cores`, fitted
to the calibration's measured samples/s), each process at most an equal part of it, and the disk's measured
rate and latency for a cold page cache. docs/prediction.md.

The check writes one row per case to predictions.jsonl, a file of format PREDICTIONS (its version and history
below; harness.results.fileformat reads and writes it).
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, replace

from harness.analysis.targetmodel import Costs, Prediction, predict
from harness.config.accelerators import Accelerator
from harness.config.target import Target
from harness.results.fileformat import FileFormat

# predictions.jsonl's format version (written under "schema" in each line), and what each version is:
PREDICTIONS_VERSION = 1
PREDICTIONS_HISTORY = {
    1: "every predictions.jsonl so far: one row per configuration: `config`, `settings`, `predicted`, "
       "`measured`, `error_pct`, `binds`, `predicted_idle_host`, `run_cores`, `visits`, `spread_pct`, "
       "`loader_ms`, `rank_ms`, `note` (the cases after the calibration); the `schema` key added within "
       "version 1 (a line without it is version 1)",
}
PREDICTIONS = FileFormat("predictions.jsonl", PREDICTIONS_VERSION, PREDICTIONS_HISTORY)
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

    @property
    def group(self) -> tuple:
        """Cases that differ only in storage run as cells of one launch."""
        return (self.world_size, self.workers, self.batch_size, self.image_size, self.decoder, self.cache_state)

    def config(self) -> dict:
        return {"world_size": self.world_size, "workers": self.workers, "batch_size": self.batch_size,
                "image_size": self.image_size, "storage": self.storage, "decoder": self.decoder,
                "page_cache": self.cache_state}


def cases(base: CheckCase, other_size: int, other_decoder: str | None = None) -> list[CheckCase]:
    """The calibration (first) and the cases, each changing one thing (other_decoder: the decoder the
    decoder case switches to; None: no decoder case)."""
    out = [replace(base, name="calibration"),
           replace(base, name=f"workers {base.workers} -> {base.workers + 1}", workers=base.workers + 1),
           replace(base, name=f"ranks {base.world_size} -> {base.world_size + 1}", world_size=base.world_size + 1),
           replace(base, name=f"batch {base.batch_size} -> {2 * base.batch_size}", batch_size=2 * base.batch_size),
           replace(base, name=f"image size {base.image_size} -> {other_size}", image_size=other_size),
           replace(base, name="storage mmap", storage="mmap"),
           replace(base, name="storage hdf5", storage="hdf5"),
           replace(base, name="page cache cold", cache_state="cold")]
    if other_decoder and other_decoder != base.decoder:
        out.insert(7, replace(base, name=f"decoder {base.decoder} -> {other_decoder}", decoder=other_decoder))
    return out


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


def case_costs(calib: Costs, base: CheckCase, case: CheckCase, bench: Bench) -> Costs:
    """The calibration's costs with what the case changes scaled by the bench's measured ratios."""
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
    cold = (bench.cold_cpu_s_per_request * calib.requests_per_sample if bench.cold_cpu_s_per_request
            else bench.cold_cpu_s_per_byte * calib.bytes_per_sample)
    return replace(calib, loader_s=loader, stages=stages, padded_pixels_per_sample=calib.padded_pixels_per_sample
                   * pixels, cold_read_extra_s=cold)


def case_target(case: CheckCase, accelerator: Accelerator, cores: float, bench: Bench) -> Target:
    """This host as the case ran on it."""
    return Target(nodes=1, gpus_per_node=case.world_size, cores_per_node=max(0.05, cores),
                  accelerator=accelerator.name, storage_read_mb_s=bench.disk_mb_s,
                  storage_latency_ms=bench.disk_latency_ms, page_cache=case.cache_state,
                  workers_per_rank=case.workers, batch_size=case.batch_size, name="this host")


def processes(case: CheckCase) -> int:
    """The run's busy processes: every rank and its workers."""
    return case.world_size * (1 + case.workers)


def predict_case(calib: Costs, base: CheckCase, case: CheckCase, bench: Bench, accelerator: Accelerator,
                 cores: float, run_cores: float | None = None) -> Prediction:
    """The case's prediction on this host when the run gets `run_cores` cores' worth of CPU in all (None:
    the host to itself), each of its processes at most an equal part of it."""
    if run_cores is None:
        got, share = cores, 1.0
    else:
        got = min(cores, run_cores)
        share = min(1.0, got / processes(case))
    return predict(case_costs(calib, base, case, bench), case_target(case, accelerator, got, bench),
                   accelerator, advise=False, share=share)


def run_cores(calib: Costs, base: CheckCase, bench: Bench, accelerator: Accelerator, cores: float,
              measured: float) -> float:
    """The CPU (in cores) the run got on this shared host during the calibration: the amount at which the
    model predicts the calibration's measured samples/s (bisection; the host's cores when even they predict
    less)."""
    def rate(c: float) -> float:
        return predict_case(calib, base, base, bench, accelerator, cores, c).samples_per_s

    if rate(cores) <= measured:
        return float(cores)
    low, high = 1e-3, float(cores)
    for _ in range(60):
        mid = 0.5 * (low + high)
        low, high = (mid, high) if rate(mid) < measured else (low, mid)
    return 0.5 * (low + high)


def error_pct(predicted: float, measured: float) -> float | None:
    return None if not measured else 100.0 * (predicted - measured) / measured


def summary(errors: list[float]) -> dict:
    """Median and largest absolute error (%) and the cases within 15%."""
    errors = [abs(e) for e in errors if e is not None]
    if not errors:
        return {"median_abs_error_pct": None, "max_abs_error_pct": None, "within_15": 0, "cases": 0}
    return {"median_abs_error_pct": statistics.median(errors), "max_abs_error_pct": max(errors),
            "within_15": sum(e <= 15 for e in errors), "cases": len(errors)}
