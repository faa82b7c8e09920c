"""One builder for the scenario files the tests write (test_faults, test_runs, test_mistakes, test_mistakes_runs,
test_ranks): a small dataset on 2 emulated V100s unless told otherwise, the [training] table a test asks for, any
other tables as TOML text, then the [matrix].

    scenario_toml({"storage": ["mmap"], "sampler": ["default", "balanced"]}, training={"batch_size": 8})
    write_scenario(tmp_path / "s.toml", {"cache": [{"name": "lru", "capacity_mb": 8}]}, training={"steps": 4})
"""
from __future__ import annotations

import json
from pathlib import Path

HARDWARE = {"accelerator": "V100-16GB", "count": 2}
DATASET = {"samples": 64, "profile": "tiny"}


def toml_value(value) -> str:
    """A TOML value: a string, bool, int, float, a list of them, or an inline table (a dict)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string: JSON's escapes are TOML's
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"no TOML for {value!r}")


def _table(name: str, fields: dict) -> str:
    return f"[{name}]\n" + "".join(f"{k} = {toml_value(v)}\n" for k, v in fields.items())


def scenario_toml(matrix: dict | None = None, *, training: dict | None = None, hardware: dict | None = None,
                  dataset: dict | None = None, description: str | None = None, tables: str = "") -> str:
    """The scenario as TOML text. ``hardware`` and ``dataset`` update HARDWARE and DATASET (e.g. ``memory_gb``);
    ``training`` is written as given (the scenario's defaults for the rest); ``tables`` is TOML text put before
    the [matrix] (e.g. ``[target]``, or a table the loader must refuse); no ``matrix``, no [matrix] table."""
    text = f"description = {toml_value(description)}\n" if description is not None else ""
    text += _table("hardware", {**HARDWARE, **(hardware or {})}) + _table("dataset", {**DATASET, **(dataset or {})})
    text += _table("training", training or {}) + tables
    return text + (_table("matrix", matrix) if matrix else "")


def write_scenario(path: Path, matrix: dict | None = None, **parts) -> Path:
    """scenario_toml(matrix, **parts) written to ``path``; returns ``path``."""
    path = Path(path)
    path.write_text(scenario_toml(matrix, **parts))
    return path
