"""Scenario loading and validation: every mistake is one UsageError naming the file or flag and the remedy."""
from __future__ import annotations

from pathlib import Path

import pytest

from harness import scenario
from harness.errors import UsageError
from harness.matrix import expand

GOOD = """
description = "test"
[hardware]
accelerator = "A100-80GB"
count = 2
[dataset]
samples = 100
profile = "tiny"
[training]
batch_size = 4
steps = 3
[matrix]
storage = ["mmap", "hdf5"]
"""


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "s.toml"
    path.write_text(text)
    return str(path)


def test_shipped_scenarios_load():
    names = scenario.available()
    assert {"4xV100", "1xV100", "smoke"} <= set(names)
    for name in names:
        sc = scenario.load(name)
        assert sc.world_size >= 1 and sc.description
    assert scenario.load("4xV100").world_size == 4
    assert scenario.load("4xV100").training.workload == "pixels"


def test_path_and_defaults(tmp_path):
    sc = scenario.load(write(tmp_path, GOOD))
    assert sc.accelerator.name == "A100-80GB" and sc.accelerator.memory_bytes == 80e9
    assert sc.training.workers == 1 and sc.training.warmup_steps == 3
    assert [c.id for c in expand(sc)] == [
        "storage=mmap,cache=none,batching=fixed,sampler=default",
        "storage=hdf5,cache=none,batching=fixed,sampler=default"]


def test_overrides(tmp_path):
    sc = scenario.load(write(tmp_path, GOOD), {"batch_size": 16, "world_size": 3, "epochs": 2,
                                               "workload": "features", "samples": 50})
    assert (sc.training.batch_size, sc.world_size, sc.training.epochs, sc.training.steps) == (16, 3, 2, 0)
    assert sc.training.workload == "features" and sc.dataset.samples == 50


@pytest.mark.parametrize("ref, message", [
    ("nope", "unknown scenario 'nope'; available: 1xV100, 4xV100"),
    ("missing/x.toml", "does not exist"),
])
def test_unknown_scenario_lists_available(ref, message):
    with pytest.raises(UsageError, match=message):
        scenario.load(ref)


@pytest.mark.parametrize("edit, message", [
    (("count = 2", "count = 0"), r"\[hardware\] count = 0 must be a positive integer"),
    (("batch_size = 4", "batch_size = -1"), r"\[training\] batch_size = -1 must be a positive integer"),
    (("batch_size = 4", 'batch_size = "4"'), r"batch_size = '4' must be of type int"),
    (("samples = 100", "samples = 1"), "exceeds 1 samples"),
    (('"A100-80GB"', '"TPUv9"'), "unknown accelerator 'TPUv9'.*known: V100-16GB"),
    (('"mmap", "hdf5"', '"mmap", "parquet"'), "unknown strategy 'parquet'; known: hdf5, mmap, raw"),
    (("steps = 3", "stepz = 3"), r"unknown field \[training\] stepz"),
    (("steps = 3", "steps = 3\nepochs = 1"), "either steps or epochs"),
    (('profile = "tiny"', 'profile = "imagenet"'), "profile = 'imagenet'; choose one of"),
])
def test_invalid_fields_name_file_and_field(tmp_path, edit, message):
    path = write(tmp_path, GOOD.replace(*edit))
    with pytest.raises(UsageError, match=message) as err:
        scenario.load(path)
    assert "\n" not in str(err.value)


def test_malformed_toml_names_line(tmp_path):
    path = write(tmp_path, GOOD.replace("count = 2", "count = = 2"))
    with pytest.raises(UsageError, match=r"s.toml: malformed TOML: .*line 5"):
        scenario.load(path)


def test_override_errors_name_the_flag(tmp_path):
    with pytest.raises(UsageError, match=r"^--batch-size = 0 must be a positive integer"):
        scenario.load(write(tmp_path, GOOD), {"batch_size": 0})
    with pytest.raises(UsageError, match=r"^--workers = -2 must be zero or more"):
        scenario.load(write(tmp_path, GOOD), {"workers": -2})
