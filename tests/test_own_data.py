"""Your own data (--data PATH, [dataset] source): tiny img2dataset-like sources in the four layouts, built on
the fly, imported into the storages and run end to end; storages materialised with their parameters; the
shards a storage has reach the shards sampler; bad sources are one line and exit 2."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from harness import cli
from harness.config import scenario
from harness.config.launchconfig import LaunchConfig
from harness.config.matrix import expand
from harness.config.request import BenchRequest
from harness.data.generator import DatasetSpec
from harness.data.importer import LAYOUTS, SourceSpec
from harness.data.materialise import load_manifest, materialise
from harness.device.devices import EmulatedDevice
from harness.errors import UsageError
from harness.results import rundir
from strategies import registry
from tests.test_importer import MAKERS, N

SCENARIO = """
description = "own data: a short matrix over an imported source"
[hardware]
accelerator = "V100-16GB"
count = 2
[dataset]
{dataset}
[training]
workload = "{workload}"
batch_size = 4
image_size = 32
warmup_steps = 1
steps = 3
workers = {workers}
[matrix]
storage = {storages}
sampler = ["default", "shards"]
"""


def write_scenario(path: Path, dataset: str = "samples = 16", workload: str = "pixels", workers: int = 0,
                   storages: str = '["mmap", { name = "webdataset", shard_size = 5 }]') -> Path:
    path.write_text(SCENARIO.format(dataset=dataset, workload=workload, workers=workers, storages=storages))
    return path


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """Every layout, two corrupt JPEGs in each (22 usable samples of 24)."""
    root = tmp_path_factory.mktemp("own")
    return {layout: MAKERS[layout](root / layout, corrupt=True) for layout in LAYOUTS}


def one_line_exit_2(argv: list[str], capsys, *needles: str) -> str:
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, err
    return err


# ---- materialising an imported source ----


def test_a_source_is_staged_in_mmap_and_the_other_storages_are_written_from_it(sources, tmp_path):
    spec = SourceSpec(sources["webdataset"])
    lmdb = materialise(spec, "lmdb", tmp_path, progress=False)
    assert lmdb.name == f"{spec.key()}-lmdb" and (tmp_path / f"{spec.key()}-mmap" / "manifest.json").is_file()
    manifest = load_manifest(lmdb)
    assert manifest["count"] == N - 2 and manifest["source"] == spec.to_dict()
    assert manifest["import"]["corrupt"] == 2 and manifest["import"]["samples"] == N - 2
    assert "generator_version" not in manifest
    expected = list(spec.iter_samples())
    reader = registry.create("storage", "lmdb").open(lmdb)
    try:
        got = reader.read_batch(list(range(len(expected))))
    finally:
        reader.close()
    assert all(a.same_as(b) for a, b in zip(got, expected))
    # the scan is kept: a fresh spec of the unchanged source reads it instead of decoding every image
    assert (tmp_path / f"{spec.key()}.scan.json").is_file()
    again = SourceSpec(sources["webdataset"])
    assert again.load_scan(tmp_path) and again.stats.corrupt == 2
    assert materialise(again, "lmdb", tmp_path, progress=False) == lmdb


def test_an_interrupted_import_leaves_no_directory_and_is_redone(sources, tmp_path, monkeypatch):
    spec = SourceSpec(sources["files"])
    storage = registry.get("storage", "parquet")

    def broken(self, samples, path, count):
        for i, _ in enumerate(samples):
            if i == 5:
                raise KeyboardInterrupt

    monkeypatch.setattr(storage, "write", broken)
    with pytest.raises(KeyboardInterrupt):
        materialise(spec, "parquet", tmp_path, progress=False)
    monkeypatch.undo()
    assert not [p for p in tmp_path.iterdir() if "parquet" in p.name and not p.name.startswith(".")]
    assert (tmp_path / f"{spec.key()}-mmap" / "manifest.json").is_file()  # the staging survived
    path = materialise(spec, "parquet", tmp_path, progress=False)
    assert load_manifest(path)["count"] == N - 2


def test_storage_parameters_that_change_the_files_get_their_own_directory(tmp_path):
    spec = DatasetSpec(samples=12, profile="tiny")
    plain = materialise(spec, "webdataset", tmp_path, progress=False)
    small = materialise(spec, "webdataset", tmp_path, progress=False, params={"shard_size": 5})
    assert plain.name == f"{spec.key()}-webdataset" and small.name == f"{spec.key()}-webdataset-shard5"
    assert [len(r) for r in registry.create("storage", "webdataset").shards(small)] == [5, 5, 2]
    # a reader-only parameter shares the default's files; hdf5's default keeps its old directory name
    assert materialise(spec, "parquet", tmp_path, progress=False, params={"cached_groups": 1}).name \
        == f"{spec.key()}-parquet"
    assert materialise(spec, "hdf5", tmp_path, progress=False).name == f"{spec.key()}-hdf5"
    chunked = materialise(spec, "hdf5", tmp_path, progress=False, params={"layout": "chunked"})
    assert chunked.name == f"{spec.key()}-hdf5-chunked16" and load_manifest(chunked)["variant"] == "-chunked16"


def test_materialise_all_keys_the_paths_by_label_and_shares_same_files(tmp_path):
    sc = scenario.load(str(write_scenario(tmp_path / "s.toml", storages='["webdataset", { name = "webdataset", '
                                          'shard_size = 5 }, { name = "parquet", cached_groups = 1 }, "parquet"]')))
    paths = LaunchConfig(BenchRequest.bare(sc.name, data_dir=tmp_path / "data"), sc, expand(sc),
                         tmp_path / "run", "emulated").materialise_all(progress=False)
    assert sorted(paths) == ["parquet", "parquet(cached_groups=1)", "webdataset", "webdataset(shard_size=5)"]
    assert paths["parquet"] == paths["parquet(cached_groups=1)"]
    assert paths["webdataset"] != paths["webdataset(shard_size=5)"]


def test_the_pipeline_gives_the_shards_sampler_the_storages_own_shards(sources, tmp_path):
    from harness.train.pipeline import build
    from harness.train.trainloop import RankContext

    sc = scenario.load(str(write_scenario(tmp_path / "s.toml", dataset=f'source = "{sources["folder"]}"')))
    config = LaunchConfig(BenchRequest.bare(sc.name, data_dir=tmp_path / "data"), sc, expand(sc),
                          tmp_path / "run", "emulated")
    paths = config.materialise_all(progress=False)
    ctx = RankContext(0, 2, EmulatedDevice(sc.accelerator, "pixels"), paths, config)
    got = {}
    for cell in config.cells:
        if cell.choice("sampler").name == "shards":
            pipeline = build(ctx, cell)
            got[cell.choice("storage").label] = [len(r) for r in pipeline.sampler.shards]
            pipeline.close()
    assert got == {"mmap": [N - 2], "webdataset(shard_size=5)": [5, 5, 5, 5, 2]}  # mmap: fixed 64-sample ranges


# ---- the scenario's [dataset] source ----


def test_a_scenario_source_is_relative_to_the_file_and_samples_limit_it(sources, tmp_path):
    rel = os.path.relpath(sources["parquet"], tmp_path)
    sc = scenario.load(str(write_scenario(tmp_path / "s.toml", dataset=f'source = "{rel}"\nsamples = 7')))
    assert isinstance(sc.dataset, SourceSpec) and sc.dataset.root == sources["parquet"].resolve()
    assert sc.dataset.layout == "parquet" and sc.dataset.limit == 7 and sc.dataset.samples == 7
    whole = scenario.load(str(write_scenario(tmp_path / "t.toml", dataset=f'source = "{rel}"\nformat = "parquet"')))
    assert whole.dataset.limit is None and whole.dataset.samples == N - 2


@pytest.mark.parametrize("dataset, message", [
    ('seed = 1', "missing required field [dataset] samples (or set [dataset] source"),
    ('samples = 8\nformat = "files"', "[dataset] format applies to an imported dataset only"),
    ('source = "x"\nformat = "zip"', "[dataset] format = 'zip'; choose one of: files, webdataset, parquet, folder"),
    ('source = "nowhere"', "[dataset] source: data source"),
])
def test_scenario_source_mistakes_are_one_line(tmp_path, dataset, message):
    with pytest.raises(UsageError, match=None) as err:
        scenario.load(str(write_scenario(tmp_path / "s.toml", dataset=dataset)))
    assert message in str(err.value) and "\n" not in str(err.value)


# ---- the command line: bad sources and options ----


def test_bad_sources_are_one_line_and_exit_2(sources, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    (tmp_path / "unknown").mkdir()
    (tmp_path / "unknown" / "readme.md").write_text("no images")
    base = ["--scenario", "formats", "--quiet", "--data-dir", str(tmp_path / "d"), "--out", str(tmp_path / "o")]
    one_line_exit_2(base + ["--data", str(tmp_path / "missing")], capsys, "--data: data source", "does not exist")
    one_line_exit_2(base + ["--data", str(tmp_path / "empty")], capsys, "is empty")
    one_line_exit_2(base + ["--data", str(tmp_path / "unknown")], capsys, "unknown layout")
    one_line_exit_2(base + ["--data", str(sources["files"]), "--data-format", "parquet"], capsys,
                    "does not hold the parquet layout")
    one_line_exit_2(base + ["--data", str(sources["files"]), "--scale", "full", "--workload", "features"], capsys,
                    "--scale full", "cannot be combined with --data")
    one_line_exit_2(base + ["--strict-data"], capsys, "--strict-data applies to an imported dataset")
    one_line_exit_2(base + ["--data", str(sources["files"]), "--strict-data"], capsys, "000000005.jpg",
                    "not a readable image")
    # strict after a lenient run: the saved scan skipped them, strict still fails
    one_line_exit_2(base + ["--data", str(sources["files"]), "--world-size", "30"], capsys,
                    "30 ranks exceed the 22 samples")
    one_line_exit_2(base + ["--data", str(sources["files"]), "--strict-data"], capsys, "not a readable")
    assert not (tmp_path / "o").exists() or not list((tmp_path / "o").iterdir())


def test_dry_run_with_data_reads_nothing_but_the_listing(sources, tmp_path, capsys):
    assert cli.main(["--scenario", "formats", "--data", str(sources["webdataset"]), "--dry-run",
                     "--data-dir", str(tmp_path)]) == 0
    assert "14 cells" in capsys.readouterr().err and not list(tmp_path.iterdir())


# ---- end to end ----


def _run(tmp_path: Path, argv: list[str]) -> tuple[Path, list, dict]:
    out = tmp_path / "out"
    assert cli.main(argv + ["--quiet", "--data-dir", str(tmp_path / "data"), "--out", str(out)]) == 0
    (run_dir,) = list(out.iterdir())
    return run_dir, rundir.read_results(run_dir), json.loads((run_dir / "env.json").read_text())


@pytest.mark.slow
@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_short_matrix_runs_on_each_layout(sources, tmp_path, layout):
    path = write_scenario(tmp_path / "own.toml", workers=1,
                          storages='["mmap", "hdf5", { name = "webdataset", shard_size = 5 }]')
    run_dir, cells, env = _run(tmp_path, ["--scenario", str(path), "--data", str(sources[layout])])
    assert len(cells) == 6 and all(c.measured and c.contract_ok for c in cells)
    assert all(c.figures.throughput > 0 and c.coverage.coverage_pct == 100.0 for c in cells)
    imp = env["import"]
    assert (imp["layout"], imp["samples"], imp["corrupt"], imp["source"]) == \
        (layout, N - 2, 2, str(sources[layout].resolve()))
    header = (run_dir / "report.md").read_text()
    start = f"Data: {N - 2} samples imported from {sources[layout].resolve()} ({layout}), 2 corrupt "
    assert any(start + what + " skipped" in header for what in ("JPEGs", "images"))  # report.py's wording


@pytest.mark.slow
def test_the_formats_scenario_runs_on_an_img2dataset_folder_and_resumes(sources, tmp_path):
    argv = ["--scenario", "formats", "--data", str(sources["files"]), "--samples", "20", "--steps", "3",
            "--warmup-steps", "1", "--batch-size", "4", "--workload", "features"]
    run_dir, cells, env = _run(tmp_path, argv)
    assert len(cells) == 14 and all(c.measured and c.contract_ok for c in cells)
    assert env["import"]["samples"] == 20 and env["dataset"]["limit"] == 20
    lines = (run_dir / "cells.jsonl").read_text().splitlines()
    (run_dir / "cells.jsonl").write_text("\n".join(lines[:12]) + "\n")  # two cells lost
    assert cli.main(["--resume", str(run_dir), "--quiet"]) == 0
    assert len((run_dir / "cells.jsonl").read_text().splitlines()) == 14


def test_image_sides_and_head_take_a_source(sources):
    from harness.data.generator import head, image_sides

    spec = SourceSpec(sources["folder"])
    assert image_sides(spec).shape == (N - 2, 2) and (image_sides(spec) == spec.image_sides()).all()
    first = head(spec, 3)
    assert [s.index for s in first] == [0, 1, 2] and first[0].same_as(next(spec.iter_samples()))
