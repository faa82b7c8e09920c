"""--loader-only on a tiny dataset: every storage, both references, both cache states; keys, not timings
(harness.loaderonly.command over harness.loaderonly.readpath; harness.loaderonly.tables renders)."""
from __future__ import annotations

import dataclasses
import json

import pytest

from harness.config import scenario
from harness.loaderonly import command as loaderonly
from harness.loaderonly.readpath import REF_ARTICLE, REF_RAM
from harness.loaderonly.rows import DecodeRow, LoaderRow, read_rows
from harness.loaderonly.tables import render

TOML = """
description = "loader-only test"
[hardware]
accelerator = "V100-16GB"
count = 1
[dataset]
samples = 40
profile = "tiny"
[training]
workload = "features"
batch_size = 8
image_size = 32
steps = 1
[matrix]
storage = ["raw", "mmap", "hdf5"]
"""


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    root = tmp_path_factory.mktemp("loader")
    path = root / "s.toml"
    path.write_text(TOML)
    sc = scenario.load(str(path))
    rows, decode = loaderonly.run(sc, root / "data", root / "run", ("warm", "cold"),
                                      workloads=("features", "pixels"), seconds=0.01, batches=12, cold_batches=2)
    return root, rows, render(rows, decode)


def test_rows_cover_every_storage_reference_fields_and_cache_state(measured):
    _, rows, _ = measured
    names = ["raw", "mmap", "hdf5", REF_RAM, REF_ARTICLE]
    for workload in ("features", "pixels"):
        for state in ("warm", "cold"):
            got = [r.storage for r in rows if r.fields == workload and r.cache_state == state]
            assert sorted(got) == sorted(names)
    for r in rows:
        assert r.batch_size == 8 and r.samples_per_s > 0 and r.mb_per_s > 0 and r.vs_ram > 0
        if r.storage == REF_RAM:
            assert r.vs_ram == 1.0
        if r.cache_state == "cold" and r.storage != REF_RAM:
            assert r.cold_verified is not None and "cold_verified" in r.to_json()
        else:
            assert "cold_verified" not in r.to_json()


def test_loader_jsonl_decode_jsonl_and_tables(measured):
    root, rows, printed = measured
    lines = [json.loads(line) for line in (root / "run" / "loader.jsonl").read_text().splitlines()]
    assert lines == [r.to_json() for r in rows]
    assert read_rows(root / "run" / "loader.jsonl", LoaderRow) == rows
    decode = read_rows(root / "run" / "decode.jsonl", DecodeRow)
    assert {d.decoder for d in decode} == {"pil", "simplejpeg"}
    assert all(d.ms_per_image > 0 and d.image_size == 32 for d in decode)
    assert "Read path alone (features fields" in printed and "Read path alone (pixels fields" in printed
    assert "Decode + resize per image" in printed and REF_ARTICLE in printed
    assert "| storage" in render(rows, decode, fmt="markdown")
    assert len(list((root / "data").glob("*-article.h5"))) == 1


def test_unknown_cache_state_is_a_usage_error(tmp_path):
    from harness.errors import UsageError

    path = tmp_path / "s.toml"
    path.write_text(TOML)
    with pytest.raises(UsageError, match="cache state 'hot'"):
        loaderonly.run(scenario.load(str(path)), tmp_path / "d", tmp_path / "r", ("hot",))


@pytest.mark.slow
def test_a_loader_only_run_writes_env_json(tmp_path):
    from harness import cli
    from harness.results import rundir

    path = tmp_path / "s.toml"
    path.write_text(TOML)
    out = tmp_path / "out"
    assert cli.main(["--scenario", str(path), "--loader-only", "--cache-state", "warm", "--quiet",
                     "--exclude", "storage=raw", "--data-dir", str(tmp_path / "data"), "--out", str(out)]) == 0
    (run,) = out.iterdir()
    env = rundir.read_env(run)
    assert env.scenario == "s" and env.cache_state == "warm" and env.device["mode"] == "loader-only"
    assert env.versions["simplejpeg"] and env.versions["h5py"] and (run / "loader.jsonl").is_file()
    timed = {json.loads(line)["storage"] for line in (run / "loader.jsonl").read_text().splitlines()}
    assert {"mmap", "hdf5"} <= timed and "raw" not in timed  # the storages of the selected cells


def test_a_dataset_without_jpegs_reads_through_the_article_reference_too(tmp_path):
    """--scale full writes embeddings and captions only: the article's HDF5 file is written without a JPEG
    dataset (an HDF5 column of empty JPEGs failed to write, and --loader-only with it)."""
    path = tmp_path / "s.toml"
    path.write_text(TOML)
    sc = scenario.load(str(path))
    sc = dataclasses.replace(sc, dataset=dataclasses.replace(sc.dataset, content="features"))  # as --scale full
    rows, _ = loaderonly.run(sc, tmp_path / "data", tmp_path / "run", ("warm",), workloads=("features",),
                                 seconds=0.01, batches=4, cold_batches=1)
    assert {r.storage for r in rows} >= {"mmap", REF_ARTICLE}
