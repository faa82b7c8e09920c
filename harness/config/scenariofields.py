"""A scenario file's fields: each section's fields with their type and default (SCHEMA), the tables
kept as they are (TOP_LEVEL), and the checks of the typed values (types, ranges, choices): each
mistake one line naming the file and field. harness.config.scenario builds the Scenario from what
these give."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from harness.data import decoders
from harness.data.decoders import DECODERS, DEFAULT_DECODER
from harness.data.generator import PROFILES
from harness.data.importer import LAYOUTS
from harness.errors import UsageError

WORKLOADS = ("pixels", "features")

# section -> field -> (type, default); a default of REQUIRED must be given in the file.
REQUIRED = object()
SCHEMA: dict[str, dict[str, tuple[type, Any]]] = {
    "hardware": {"accelerator": (str, REQUIRED), "count": (int, REQUIRED), "memory_gb": (float, 0.0)},
    # samples: required unless source is set (then it limits the import to the first N samples)
    "dataset": {"samples": (int, 0), "seed": (int, 0), "profile": (str, "cc3m"),
                "image_scale": (float, 1.0), "source": (str, ""), "format": (str, ""), "strict": (bool, False),
                "classes": (int, 0)},
    "training": {"workload": (str, "pixels"), "batch_size": (int, REQUIRED), "image_size": (int, 160),
                 "warmup_steps": (int, 3), "steps": (int, 0), "epochs": (int, 0), "workers": (int, 1),
                 "prefetch_factor": (int, 2), "persistent_workers": (bool, True), "lr": (float, 0.01),
                 "seed": (int, 0), "cell_timeout_s": (float, 0.0), "decoder": (str, DEFAULT_DECODER)},
    # budget_s: the default run's time budget (passes until the answer is decided; --quick: one pass)
    "run": {"budget_s": (float, 0.0)},
}
# [accelerators.NAME] (catalogue entries of the scenario's own, keys as in scenarios/accelerators.toml) and
# [target] are kept as raw tables on the Scenario (accelerators_extra, target); other modules interpret them.
TOP_LEVEL = {"description", "hardware", "dataset", "training", "run", "matrix", "accelerators", "target",
             "remote"}
MAX_INT = 2**63 - 1  # what a 64-bit counter holds; a larger integer in a scenario is a mistake


def typed_sections(path: Path, raw: dict[str, Any], where) -> dict[str, dict[str, Any]]:
    """Every section's fields, typed, defaults filled in; unknown or missing fields are errors."""
    unknown = set(raw) - TOP_LEVEL
    if unknown:
        raise UsageError(f"{path}: unknown section or field {sorted(unknown)[0]!r}; "
                         f"known: {', '.join(sorted(TOP_LEVEL))}")
    values: dict[str, dict[str, Any]] = {}
    for section, fields in SCHEMA.items():
        given = raw.get(section, {})
        if not isinstance(given, dict):
            raise UsageError(f"{path}: [{section}] must be a table")
        extra = set(given) - set(fields)
        if extra:
            raise UsageError(f"{path}: unknown field [{section}] {sorted(extra)[0]}; "
                             f"known: {', '.join(fields)}")
        values[section] = {}
        for key, (kind, default) in fields.items():
            if key not in given:
                if default is REQUIRED:
                    raise UsageError(f"{path}: missing required field [{section}] {key}")
                values[section][key] = default
                continue
            values[section][key] = _typed(given[key], kind, where(section, key))
    return values


# the float fields whose range no check in check_values owns (image_scale, cell_timeout_s and memory_gb have
# their own lines there, with their remedies): > 0, and >= 0
POSITIVE_FLOATS = {("training", "lr")}
NON_NEGATIVE_FLOATS = {("run", "budget_s")}


def _check_floats(values: dict[str, dict[str, Any]], where) -> None:
    """Every float field finite (TOML writes nan and inf; an infinite cell_timeout_s would switch
    the hang guard off), and the ranges of the fields listed above."""
    for section, spec in SCHEMA.items():
        for key, (kind, _) in spec.items():
            value = values[section][key]
            if kind is not float:
                continue
            if not math.isfinite(value):
                raise UsageError(f"{where(section, key)} = {value} must be a finite number")
            if (section, key) in POSITIVE_FLOATS and value <= 0:
                raise UsageError(f"{where(section, key)} = {value:g} must be above zero")
            if (section, key) in NON_NEGATIVE_FLOATS and value < 0:
                raise UsageError(f"{where(section, key)} = {value:g} must be zero or more")


def check_values(path: Path, values: dict[str, dict[str, Any]], where) -> None:
    """Ranges and choices of the typed fields."""
    _check_floats(values, where)
    hw, ds, tr = values["hardware"], values["dataset"], values["training"]
    for key in ("format", "strict"):
        if ds[key] and not ds["source"]:
            raise UsageError(f"{where('dataset', key)} applies to an imported dataset only: set [dataset] "
                             f"source too, or remove {key}")
    check_classes(ds, where)
    if ds["format"] and ds["format"] not in LAYOUTS:
        raise UsageError(f"{where('dataset', 'format')} = {ds['format']!r}; choose one of: {', '.join(LAYOUTS)} "
                         f"(or leave it out to detect it)")
    for section, key in (("hardware", "count"), ("dataset", "samples"), ("training", "batch_size"),
                         ("training", "image_size"), ("training", "prefetch_factor")):
        if section == "dataset" and ds["source"] and not ds["samples"]:
            continue  # every sample of the source
        if values[section][key] <= 0:
            raise UsageError(f"{where(section, key)} = {values[section][key]} must be a positive integer")
    for section, key in (("training", "warmup_steps"), ("training", "steps"), ("training", "epochs"),
                         ("training", "workers")):
        if values[section][key] < 0:
            raise UsageError(f"{where(section, key)} = {values[section][key]} must be zero or more")
    if tr["steps"] and tr["epochs"]:
        raise UsageError(f"{path}: set either steps or epochs in [training], not both "
                         f"(pass only one of --steps and --epochs)")
    if not tr["steps"] and not tr["epochs"]:
        raise UsageError(f"{where('training', 'steps')}: give steps > 0 or epochs > 0")
    if tr["workload"] not in WORKLOADS:
        raise UsageError(f"{where('training', 'workload')} = {tr['workload']!r}; "
                         f"choose one of: {', '.join(WORKLOADS)}")
    if tr["decoder"] not in DECODERS:
        raise UsageError(f"{where('training', 'decoder')} = {tr['decoder']!r}; "
                         f"choose one of: {', '.join(DECODERS)}")
    if not decoders.installed(tr["decoder"]):  # named in the file: the default is always installed
        raise UsageError(f"{where('training', 'decoder')} = {tr['decoder']!r} needs the {tr['decoder']} "
                         f"package, which is not installed: pip install {tr['decoder']}, or set "
                         f"decoder = \"pil\"")
    if ds["profile"] not in PROFILES:
        raise UsageError(f"{where('dataset', 'profile')} = {ds['profile']!r}; "
                         f"choose one of: {', '.join(PROFILES)}")
    if ds["image_scale"] <= 0:
        raise UsageError(f"{where('dataset', 'image_scale')} must be > 0")
    if ds["samples"] and hw["count"] > ds["samples"]:  # a source's own size is checked once it is scanned
        raise UsageError(f"{where('hardware', 'count')} = {hw['count']} ranks exceeds "
                         f"{ds['samples']} samples; use more samples or fewer ranks")
    if ds["samples"] and not ds["source"]:  # a source's size is known once it is scanned
        batch_fits_share(tr["batch_size"], ds["samples"], hw["count"], where("training", "batch_size"))
    if tr["cell_timeout_s"] < 0:
        raise UsageError(f"{where('training', 'cell_timeout_s')} must be >= 0 (0: derived from the steps)")
    if hw["memory_gb"] < 0:
        raise UsageError(f"{where('hardware', 'memory_gb')} must be > 0 (or left out for the catalogue's)")


def check_classes(ds: dict[str, Any], where) -> None:
    """[dataset] classes: 0 (none), or 2 to samples classes of a generated dataset (clustered in
    storage order)."""
    classes = ds["classes"]
    if not classes:
        return
    if ds["source"]:
        raise UsageError(f"{where('dataset', 'classes')} applies to a generated dataset only: an imported source "
                         f"has no classes; remove classes")
    if classes < 2 or classes > ds["samples"]:
        raise UsageError(f"{where('dataset', 'classes')} = {classes} must be 0 (no classes) or 2 to "
                         f"{ds['samples']} (the samples)")


def _typed(value: Any, kind: type, where: str) -> Any:
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if kind is int and isinstance(value, bool) or not isinstance(value, kind):
        raise UsageError(f"{where} = {value!r} must be of type {kind.__name__}")
    if kind is int and abs(value) > MAX_INT:
        raise UsageError(f"{where} = {value} is beyond 2^63 - 1; give a realistic value")
    return value


TINY = 1e-9  # a non-zero magnitude below this is no realistic setting (1e-320: a subnormal float)


def number(value: Any, where: str, *, whole: bool = False, least: float = 0, above: bool = False,
           most: float = 1e12, remedy: str = "") -> int | float:
    """A number a user gave, checked: a whole number where `whole` (a float or bool is not),
    finite, zero or at least TINY in magnitude, >= `least` (> it where `above`) and <= `most`; a
    float field takes an int. Else a one-line UsageError naming `where` (the file or flag, and the
    field), the value and `remedy`."""
    kind = "a whole number" if whole else "a number"
    wrong = isinstance(value, bool) or not isinstance(value, int if whole else int | float)
    bound = f"above {least:g}" if above else f"at least {least:g}"
    fix = f"; {remedy}" if remedy else ""
    if wrong:
        raise UsageError(f"{where} = {value!r} must be {kind} {bound}{fix}")
    if not math.isfinite(value) or value > most or (value <= least if above else value < least):
        raise UsageError(f"{where} = {value!r} must be {kind} {bound} and at most {most:g}{fix}")
    if value and abs(value) < TINY:
        raise UsageError(f"{where} = {value!r} is too small to be a setting (0 or at least {TINY:g}){fix}")
    return value if whole else float(value)


def batch_fits_share(batch_size: int, samples: int, ranks: int, where: str) -> None:
    """A batch no larger than one rank's share of the dataset (every step would read the share, and
    the report would state a batch size no step had)."""
    share = -(-samples // ranks)
    if batch_size > share:
        raise UsageError(f"{where} = {batch_size} exceeds each rank's share of the dataset ({share} samples: "
                         f"{samples} over {ranks} ranks), so no step could read {batch_size}; lower it to "
                         f"{share} or less, or use more samples")


def stop_within_epoch(stop: int, samples: int, ranks: int, batch_size: int) -> None:
    """check-resume --stop N: N batches (0: half the epoch) end inside each rank's epoch at the
    scenario's batch size, so that a batch is left to read after the stop; else a one-line
    UsageError."""
    batches = max(1, -(-samples // ranks) // batch_size)
    if stop >= batches:
        allowed = f"--stop 1 to {batches - 1}, " if batches > 1 else ""
        raise UsageError(f"--stop {stop}: each rank's epoch has {batches} batches ({samples} samples over {ranks} "
                         f"ranks, batch {batch_size}), so the stop must be below that; give {allowed}0 for half "
                         f"the epoch, or more --samples")
