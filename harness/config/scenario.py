"""Scenarios: TOML files in scenarios/, read with tomllib and validated into typed objects.

Every mistake becomes one UsageError naming the file, the field (or the command-line flag that set
it) and the remedy.
"""
from __future__ import annotations

import sys
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from harness.config.accelerators import Accelerator, get_accelerator
from harness.config.choices import StrategyChoice, parse_matrix
from harness.config.scenariofields import batch_fits_share, check_values, typed_sections
from harness.data import bucket, decoders
from harness.data.decoders import DEFAULT_DECODER
from harness.data.generator import DatasetSpec
from harness.data.importer import SourceSpec
from harness.errors import UsageError
from harness.lab import session

__all__ = ["Scenario", "StrategyChoice", "Training", "load"]

SCENARIO_DIR = Path(__file__).resolve().parents[2] / "scenarios"
NOT_SCENARIOS = {"accelerators"}
# command-line flag -> (section, field)
OVERRIDES = {
    "samples": ("dataset", "samples"), "steps": ("training", "steps"), "epochs": ("training", "epochs"),
    "batch_size": ("training", "batch_size"), "workers": ("training", "workers"),
    "world_size": ("hardware", "count"), "workload": ("training", "workload"),
    "warmup_steps": ("training", "warmup_steps"),
}


@dataclass(frozen=True)
class Training:
    workload: str
    batch_size: int
    image_size: int
    warmup_steps: int
    steps: int
    epochs: int
    workers: int
    prefetch_factor: int
    persistent_workers: bool
    lr: float
    seed: int
    cell_timeout_s: float = 0.0  # a cell's deadline; 0: derived from its steps (harness.run.supervisor)
    decoder: str = DEFAULT_DECODER  # the pixels workload's JPEG decoder (harness.data.decoders)


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    path: Path
    accelerator: Accelerator
    world_size: int
    dataset: DatasetSpec  # or an imported source (harness.data.importer.SourceSpec): [dataset] source, --data
    training: Training
    matrix: dict[str, list[StrategyChoice]] = field(default_factory=dict)
    accelerators_extra: dict[str, dict[str, Any]] = field(default_factory=dict)  # [accelerators.NAME], raw
    target: dict[str, Any] | None = None  # [target], raw
    remote: session.RemoteSettings | None = None  # [remote]: the project's own object store (harness.lab.session)
    budget_s: float = 0.0  # [run] budget_s: a plain run's time budget (0: one pass); --budget, --repeats, --quick


def available() -> dict[str, Path]:
    """Scenario name -> file, for every scenario shipped in scenarios/."""
    return {p.stem: p for p in sorted(SCENARIO_DIR.glob("*.toml")) if p.stem not in NOT_SCENARIOS}


def describe_all() -> list[tuple[str, str]]:
    out = []
    for name, path in available().items():
        try:
            out.append((name, str(_read_toml(path).get("description", ""))))
        except UsageError as err:
            out.append((name, f"(invalid: {err})"))
    return out


def resolve_path(ref: str) -> Path:
    """A scenario name from scenarios/ or a path to a TOML file."""
    scenarios = available()
    if ref in scenarios:
        return scenarios[ref]
    path = Path(ref)
    if path.is_dir():
        raise UsageError(f"scenario {ref} is a directory, not a scenario file; pass a .toml file (e.g. "
                         f"{path / 'NAME.toml'}) or one of: {', '.join(scenarios)}")
    if path.suffix == ".toml" or "/" in ref:
        if not path.is_file():
            raise UsageError(f"scenario file {ref} does not exist; pass a TOML file or one of: "
                             f"{', '.join(scenarios)}")
        return path
    raise UsageError(f"unknown scenario {ref!r}; available: {', '.join(scenarios)} "
                     f"(or pass a path to a .toml file)")


def load_shipped(name: str | None) -> Scenario:
    """A shipped scenario by the name a run directory records (env.json, a cells.jsonl line): a
    name read back is never taken as a path; a UsageError when it names none of scenarios/."""
    shipped = available()
    if not name:
        raise UsageError("the run's env.json names no scenario, whose defaults a --target file needs")
    if not isinstance(name, str) or name not in shipped:
        raise UsageError(f"the run's scenario {name!r} is not a shipped scenario (scenarios/), whose defaults "
                         f"a --target file needs; give a run of one of: {', '.join(shipped)}")
    return load(name)


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as err:
        raise UsageError(f"{path}: malformed TOML: {err}; fix the file") from None
    except UnicodeDecodeError as err:
        raise UsageError(f"{path}: not UTF-8 text (byte 0x{err.object[err.start]:02x} at offset {err.start}); "
                         f"TOML files are UTF-8: save the scenario file as UTF-8") from None
    except OSError as err:
        raise UsageError(f"{path}: cannot read scenario: {err.strerror}") from None


def load(ref: str, overrides: dict[str, Any] | None = None) -> Scenario:
    """Read, override and validate a scenario."""
    path = resolve_path(ref)
    raw = _read_toml(path)
    origin: dict[tuple[str, str], str] = {}
    for flag, value in (overrides or {}).items():
        if value is None:
            continue
        section, key = OVERRIDES[flag]
        raw.setdefault(section, {})[key] = value
        origin[(section, key)] = "--" + flag.replace("_", "-")
    given = overrides or {}
    for flag, other in (("steps", "epochs"), ("epochs", "steps")):
        if given.get(flag) is not None and given.get(other) is None:
            raw.setdefault("training", {})[other] = 0  # --steps replaces the file's epochs and vice versa
    return _validate(path, raw, origin)


def _validate(path: Path, raw: dict[str, Any], origin: dict[tuple[str, str], str]) -> Scenario:
    def where(section: str, key: str) -> str:
        return origin.get((section, key)) or f"{path} [{section}] {key}"

    if isinstance(raw.get("hardware"), dict) and raw["hardware"].get("count") == "auto":
        raw["hardware"]["count"] = _visible_gpu_count(path)  # the `gpu` scenario: every visible GPU
    values = typed_sections(path, raw, where)
    if not values["dataset"]["source"] and "samples" not in raw.get("dataset", {}):
        raise UsageError(f"{path}: missing required field [dataset] samples (or set [dataset] source to "
                         f"import a dataset)")
    check_values(path, values, where)
    hw, ds, tr = values["hardware"], values["dataset"], values["training"]
    if tr["workload"] == "pixels" and "decoder" not in raw.get("training", {}):
        _note_decoder_fallback()
    try:
        accelerator = get_accelerator(hw["accelerator"], _extra_tables(path, raw)["accelerators_extra"])
    except UsageError as err:
        raise UsageError(f"{path}: {err}") from None
    if hw["memory_gb"]:  # e.g. a MIG slice or a GPU shared with another job
        accelerator = replace(accelerator, memory_bytes=int(hw["memory_gb"] * 1e9))
    return Scenario(
        name=path.stem,
        description=str(raw.get("description", "")),
        path=path,
        accelerator=accelerator,
        world_size=hw["count"],
        dataset=_dataset(path, ds, where),
        training=Training(**tr),
        matrix=parse_matrix(path, raw.get("matrix", {}), _settings(hw, ds, tr), _settings_origin(origin)),
        remote=session.settings(path, raw.get("remote")),
        budget_s=values["run"]["budget_s"],
        **_extra_tables(path, raw),
    )


_noted_fallback = False


def _note_decoder_fallback() -> None:
    """Once per process, on stderr: the default decoder fell back to PIL
    (harness.data.decoders)."""
    global _noted_fallback
    note = decoders.fallback_note()
    if note and not _noted_fallback:
        _noted_fallback = True
        print(note, file=sys.stderr)


def _settings(hw: dict[str, Any], ds: dict[str, Any], tr: dict[str, Any]) -> dict[str, Any]:
    """The training settings a strategy's parameters are checked against (strategies.registry
    .check_training); samples is None while an imported source is not scanned."""
    return {"batch_size": tr["batch_size"], "world_size": hw["count"],
            "samples": None if ds["source"] else ds["samples"], "workers": tr["workers"]}


def _settings_origin(origin: dict[tuple[str, str], str]) -> str:
    names = {("training", "batch_size"): "batch_size", ("hardware", "count"): "ranks",
             ("dataset", "samples"): "samples", ("training", "workers"): "workers"}
    given = [f"{names[k]} from {flag}" for k, flag in origin.items() if k in names]
    return f"; {', '.join(given)}" if given else ""


def _extra_tables(path: Path, raw: dict[str, Any]) -> dict[str, Any]:
    """[accelerators.NAME] and [target] as given (shape checked only: tables)."""
    extra = raw.get("accelerators", {})
    if not isinstance(extra, dict) or any(not isinstance(v, dict) for v in extra.values()):
        raise UsageError(f"{path}: [accelerators] must hold tables [accelerators.NAME] with the keys of "
                         f"scenarios/accelerators.toml")
    target = raw.get("target")
    if target is not None and not isinstance(target, dict):
        raise UsageError(f"{path}: target must be a table [target]")
    return {"accelerators_extra": extra, "target": target}


def _dataset(path: Path, ds: dict[str, Any], where) -> DatasetSpec | SourceSpec:
    """The generated dataset, or the source [dataset] source names (a bucket's s3:// URL as it is,
    a folder relative to the scenario file)."""
    if not ds["source"]:
        return DatasetSpec(samples=ds["samples"], seed=ds["seed"], profile=ds["profile"],
                           image_scale=ds["image_scale"], classes=ds["classes"])
    data = ds["source"] if bucket.url_of(ds["source"]) else path.parent / Path(ds["source"]).expanduser()
    return source_spec(data, ds["format"] or None, ds["strict"], ds["samples"] or None, where("dataset", "source"))


def source_spec(data: Path | str, layout: str | None, strict: bool, limit: int | None,
                where: str = "--data") -> SourceSpec:
    """An imported source as the scenario's dataset (harness.data.importer; nothing is read beyond
    the folder's listing until it is scanned). Its errors name ``where``."""
    try:
        return SourceSpec(data, layout=layout, strict=strict, limit=limit)
    except UsageError as err:
        raise UsageError(f"{where}: {err}") from None


def checked_source_size(sc: Scenario, where: str = "the data source", limit_from: str = "--samples",
                        batch_from: str = "--batch-size") -> None:
    """After the source's scan: as many samples as the limit asked for (``limit_from`` names where
    it was set), as many as ranks, and a batch no larger than a rank's share."""
    spec = sc.dataset
    if spec.limit is not None and spec.samples < spec.limit:
        raise UsageError(f"{limit_from} = {spec.limit} asks for more samples than {where} has ({spec.samples}); "
                         f"pass --samples {spec.samples} or less (or leave it out for the whole source)")
    if sc.world_size > spec.samples:
        raise UsageError(f"{sc.world_size} ranks exceed the {spec.samples} samples of {where}; use a "
                         f"bigger source or fewer ranks (--world-size)")
    batch_fits_share(sc.training.batch_size, spec.samples, sc.world_size, batch_from)


def _visible_gpu_count(path: Path) -> int:
    from harness.measure import gpuinfo

    count = gpuinfo.gpu_count()
    if not count:
        raise UsageError(f'{path}: [hardware] count = "auto" runs on every visible GPU and none is visible '
                         f'here; run a scenario that names its accelerator (e.g. 1xH200) to emulate one')
    return count
