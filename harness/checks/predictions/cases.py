"""Pure: the configurations --check-predictions measures and what it scores: the calibration and
the cases (`cases`, each a harness.analysis.checkcases.CheckCase), the pairings (`Pairing`: a case
predicted from a calibration's measured costs), a copy of its calibration, the errors and their
summary. docs/prediction.md.

The check writes one row per case to predictions.jsonl, a file of format PREDICTIONS (its version
and history below; harness.results.fileformat reads and writes it). """
from __future__ import annotations

import statistics
from dataclasses import dataclass, replace

from harness.analysis.checkcases import CheckCase
from harness.analysis.targetmodel import Costs
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
       "`inside` (the measurement fell in it), `noise_pct` (the sd of log(predicted / measured) the noise "
       "alone makes, %, null where no interval is); `flag` calibration also marks the case at one rank more (the "
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


@dataclass(frozen=True)
class Pairing:
    """One scored prediction: the measured case `case` predicted from the costs of the case
    `source`."""

    name: str
    source: str
    case: str


ONE_CPU = "calibration on 1 CPU"


def cases(base: CheckCase, other_size: int, other_decoder: str | None = None,
          allowance: int = 1) -> list[CheckCase]:
    """The calibration (first) and the cases, each changing one thing or two (other_decoder: the
    decoder the decoder case switches to; None: no decoder case): across the workers (one more,
    none: the rank loads inline), the ranks (one more: the ranks' wait is measured there; two more;
    four times), the batch (twice, half), the image size (`other_size`, and x0.7), the storages,
    the page cache (cold in each storage), the decoder; with an allowance of 2 CPUs or more, the
    calibration's configuration confined to 1 CPU, the other calibration of the machine-boundary
    pairings."""
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
    """What the check scores: each case from the calibration (the calibration itself first), and
    across the machine boundary: the 1-CPU launch from the calibration, and from the 1-CPU
    calibration the calibration's configuration, the workers case and the ranks case on the whole
    allowance."""
    names = {c.name for c in all_cases}
    out = [Pairing(c.name if c.name != ONE_CPU else f"1 CPU (from {allowance})", "calibration", c.name)
           for c in all_cases]
    if ONE_CPU in names:
        out.append(Pairing(f"{allowance} CPUs (from 1)", ONE_CPU, "calibration"))
        out += [Pairing(f"{c.name} on {allowance} CPUs (from 1)", ONE_CPU, c.name) for c in all_cases
                if c.name.startswith(("workers ", "ranks "))]
    return out


def ranks_calibration(all_cases: list[CheckCase]) -> str | None:
    """The case that is the calibration at one rank more (the ranks' wait is measured in it: its
    own rows are repeats, not predictions); None where the cases have none."""
    base = all_cases[0]
    more = replace(base, world_size=base.world_size + 1)
    return next((c.name for c in all_cases if replace(c, name=base.name) == more), None)


def measured_at(costs: Costs, samples_per_s: float, cpus: float, outside_pct: float) -> Costs:
    """The costs as measured: with the share of the run's CPUs busy that its own CPU (samples/s x
    the CPU per sample) and the outside load made, the load the contention factor is undone at."""
    busy = samples_per_s * (costs.loader_s + costs.rank_s) / cpus + outside_pct / 100.0
    return replace(costs, busy_share=min(1.0, busy))


COPY_PCT = 2.0  # a prediction within this of its calibration's own prediction scores the calibration again


def is_copy(predicted: float, calibration_predicted: float) -> bool:
    """A case the model predicts as its calibration (no cost it changes moves the binding bound):
    its error is the calibration's own again, so it is flagged and left out of the median."""
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
