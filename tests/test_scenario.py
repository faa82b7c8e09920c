"""Scenario loading and validation: every mistake is one UsageError naming the file or flag and the remedy."""
from __future__ import annotations

from pathlib import Path

import pytest

from harness import cli
from harness.config import scenario
from harness.config.matrix import expand, select
from harness.errors import UsageError
from harness.measure import gpuinfo

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
        if name == "gpu" and not gpuinfo.gpu_count():
            continue  # every visible GPU: without one it is a one-line UsageError (tests/test_models.py)
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
    ("nope", "unknown scenario 'nope'; available: 1xH200, 1xV100, 4xV100"),
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
    (('"mmap", "hdf5"', '"mmap", "tfrecord"'),
     "unknown strategy 'tfrecord'; known: hdf5, "),
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


@pytest.mark.parametrize("entry, message", [
    ('{ name = "lru", capacity_MB = 64 }',
     r"s.toml: matrix.cache: cache strategy 'lru' has no parameter 'capacity_MB'; "
     r"accepted: capacity_mb, level, scope$"),
    ('{ name = "lru", capacity_mb = -1 }',
     r"s.toml: matrix.cache: cache strategy 'lru': capacity_mb must be a finite number >= 0, got -1$"),
    ('{ name = "lru", scope = "node" }', r"matrix.cache: cache strategy 'lru': scope must be one of"),
])
def test_strategy_parameters_are_validated_at_load(tmp_path, entry, message):
    path = write(tmp_path, GOOD + f"cache = [\"none\", {entry}]\n")
    with pytest.raises(UsageError, match=message) as err:
        scenario.load(path)
    assert "\n" not in str(err.value)


def test_mistyped_parameter_fails_the_dry_run_with_exit_2(tmp_path, capsys):
    path = write(tmp_path, GOOD + 'cache = [{ name = "lru", capacity_MB = 64 }]\n')
    data = tmp_path / "data"
    code = cli.main(["--scenario", path, "--dry-run", "--data-dir", str(data), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "matrix.cache: cache strategy 'lru' has no parameter 'capacity_MB'; accepted: capacity_mb" in err
    assert not data.exists()  # nothing generated


def test_plugin_strategy_parameters_are_validated_too(tmp_path, capsys):
    path = write(tmp_path, GOOD + 'sampler = [{ name = "seed_balance", weight = 2 }]\n')
    code = cli.main(["--scenario", path, "--dry-run", "--plugin", "tests.plugins.seed_strategies"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "matrix.sampler: sampler strategy 'seed_balance' has no parameter 'weight'; accepted: none" in err


def test_a_broken_entry_point_is_a_usage_error(tmp_path, monkeypatch):
    info = tmp_path / "dlbench_broken_sc-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: dlbench-broken-sc\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[dlbench.strategies]\nbroken = dlbench_not_there\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(UsageError, match="^entry point broken = dlbench_not_there of dlbench-broken-sc"):
        scenario.load(write(tmp_path, GOOD))


MATRIX = GOOD.replace('storage = ["mmap", "hdf5"]', 'storage = ["raw", "mmap", "hdf5"]\ncache = ["none", "lru"]')


def test_filters_check_names_against_the_whole_matrix(tmp_path):
    cells = expand(scenario.load(write(tmp_path, MATRIX)))
    kept = select(cells, ["storage=hdf5"], ["storage=raw"])  # raw is already gone after --only: still fine
    assert [c.id for c in kept] == ["storage=hdf5,cache=none,batching=fixed,sampler=default",
                                    "storage=hdf5,cache=lru,batching=fixed,sampler=default"]
    assert len(select(cells, ["cache=lru", "storage=raw,mmap"], ["storage=hdf5", "cache=none"])) == 2
    with pytest.raises(UsageError, match=r"--exclude storage=parquet: parquet is not in the matrix's storage"):
        select(cells, ["storage=hdf5"], ["storage=parquet"])
    with pytest.raises(UsageError, match="leave no cell"):
        select(cells, ["storage=hdf5"], ["cache=none,lru"])


def test_each_repeat_visits_the_cells_in_its_own_recorded_order():
    from harness.config.launchconfig import visit_order

    first, second = visit_order(24, 0, "random", 5), visit_order(24, 1, "random", 5)
    assert sorted(first) == sorted(second) == list(range(24)) and first != second
    assert visit_order(24, 0, "random", 5) == first  # a pure function of (seed, repeat)
    assert visit_order(24, 0, "random", 6) != first
    assert visit_order(24, 3, "fixed", 5) == list(range(24))


@pytest.mark.parametrize("section, line, message", [
    ("hardware", "memory_gb = nan", "[hardware] memory_gb = nan must be a finite number"),
    ("dataset", "image_scale = inf", "[dataset] image_scale = inf must be a finite number"),
    ("training", "cell_timeout_s = inf", "[training] cell_timeout_s = inf must be a finite number"),  # no hang guard
    ("training", "cell_timeout_s = -1.0", "[training] cell_timeout_s must be >= 0 (0: derived from the steps)"),
    ("dataset", "image_scale = -1.0", "[dataset] image_scale must be > 0"),
    ("training", "lr = nan", "[training] lr = nan must be a finite number"),
    ("training", "lr = 0.0", "[training] lr = 0 must be above zero"),
])
def test_every_float_of_a_scenario_is_finite_and_in_range(tmp_path, section, line, message):
    import re

    key = line.split(" =")[0]
    text = re.sub(rf"^{key} *=.*\n", "", scenario.resolve_path("smoke").read_text(), flags=re.M)
    text = text.replace(f"[{section}]\n", f"[{section}]\n{line}\n", 1)
    (tmp_path / "s.toml").write_text(text)
    with pytest.raises(UsageError) as err:
        scenario.load(str(tmp_path / "s.toml"))
    assert str(err.value) == f"{tmp_path / 's.toml'} {message}"


def test_a_level_listed_twice_is_refused(tmp_path):
    """`storage = ["raw", "raw"]` gave two cells with one id."""
    text = scenario.resolve_path("smoke").read_text()
    (tmp_path / "s.toml").write_text(text.split("[matrix]")[0] + '[matrix]\nstorage = ["raw", "mmap", "raw"]\n')
    with pytest.raises(UsageError, match=r"\[matrix\] storage lists raw more than once; name each level once$"):
        scenario.load(str(tmp_path / "s.toml"))


def test_a_matrix_no_budget_can_run_is_refused_before_it_is_listed(tmp_path):
    text = scenario.resolve_path("smoke").read_text().split("[matrix]")[0]
    lru = ", ".join(f'{{ name = "lru", capacity_mb = {n} }}' for n in range(1, 101))
    batching = ", ".join(f'{{ name = "dynamic", max_batch = {n} }}' for n in range(8, 58))
    (tmp_path / "s.toml").write_text(text + f'[matrix]\ncache = [{lru}]\nbatching = [{batching}]\n')
    with pytest.raises(UsageError, match=r"\[matrix\] makes 5000 cells, more than 4096"):
        scenario.load(str(tmp_path / "s.toml"))


def test_runnable_keeps_the_cells_this_machine_can_run_and_says_why_it_left_the_others():
    from harness.config.choices import StrategyChoice
    from harness.config.matrix import Cell, runnable

    ok, gone = StrategyChoice("storage", "raw"), StrategyChoice("storage", "lmdb", unavailable="s.toml: matrix."
                                                                "storage: the lmdb storage needs the lmdb package")
    cells = [Cell((ok, StrategyChoice("cache", "none"))), Cell((gone, StrategyChoice("cache", "none")))]
    kept, notes = runnable(cells)
    assert kept == cells[:1] and notes == ["leaves out storage=lmdb: the lmdb storage needs the lmdb package"]
    with pytest.raises(UsageError, match="needs the lmdb package"):
        runnable(cells[1:])  # nothing left to run: the first reason, as before
