"""The order figures in a cell's line (harness.results.cellorder through cellresult.cell_line): from the ranks'
consumed indices and window batch sizes, against the layout of the cell's storage (the units the pipeline noted)
and the classes of the generated data ([dataset] classes); an old line without them still reads and round-trips."""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from harness import cli
from harness.config import scenario
from harness.config.choices import StrategyChoice
from harness.config.matrix import Cell
from harness.data import generator, storageunits
from harness.errors import UsageError
from harness.measure.rankrecord import RankRecord
from harness.results import orderquality as oq
from harness.results.cellresult import CellResult, cell_line

FIXTURES = Path(__file__).parent / "fixtures"


def rank_record(rank: int, consumed: dict, batch_sizes: list[int]) -> RankRecord:
    n = len(batch_sizes)
    return RankRecord(rank=rank, wait=[0.01] * n, h2d=[0.0] * n, peer_wait=[0.0] * n, device=[0.02] * n,
                      overhead=[0.0] * n, cost=[1.0] * n, step=[0.03] * n, steps=n, window_s=0.03 * n,
                      samples=sum(batch_sizes), batch_sizes=batch_sizes, workers=1, page_cache={"state": "as-is"},
                      consumed=consumed)


def sequential_ranks(size: int, b: int, steps: int, warmup: int) -> list[RankRecord]:
    """Two ranks reading contiguous halves in index order (a stream without a shuffle): warm-up then window."""
    half = size // 2
    return [rank_record(r, {0: list(range(r * half, r * half + (warmup + steps) * b))}, [b] * steps)
            for r in range(2)]


def the_scenario(dataset) -> SimpleNamespace:
    return SimpleNamespace(name="t", dataset=dataset, training=SimpleNamespace(workload="features", batch_size=8))


def test_a_sequential_cell_has_its_order_figures_in_its_line():
    cell = Cell((StrategyChoice("storage", "mmap"), StrategyChoice("sampler", "test_sequential")))
    spec = generator.DatasetSpec(samples=512, profile="tiny", classes=8)
    line = cell_line(the_scenario(spec), cell, "V100 (emulated)", True, sequential_ranks(512, 8, 6, 2), 1.0)
    f = line["figures"]
    assert f["order_units_per_batch"] == 1.0 and f["order_position_rho"] == 1.0  # 8 of a block of 64, in order
    assert f["order_label_tv"] == pytest.approx(1 - 1 / 8)  # one class per batch (clusters of 64)
    assert f["order_units_ideal"] == pytest.approx(round(8 * (1 - oq.miss_probability(512, 64, 8)), 6))
    assert f["order_units_ratio"] == pytest.approx(f["order_units_per_batch"] / f["order_units_ideal"], abs=1e-5)
    assert f["order_position_mixing"] == 0.0 and f["order_label_ratio"] < 0.5
    order = line["order"]
    assert order["unit"] == "blocks of 64" and order["units"] == 8 and order["classes"] == 8
    assert [r["rank"] for r in order["ranks"]] == [0, 1] and order["ranks"][1]["batches"] == 6
    assert order["label_spread"].startswith("Monte-Carlo")
    read = CellResult.from_json(json.loads(json.dumps(line)))
    assert read.order.ranks[0].units_per_batch == 1.0 and read.figures.order_units_ratio == f["order_units_ratio"]
    assert read.to_json() == line  # round-trips


def test_the_storage_units_the_pipeline_noted_are_the_cells_units(tmp_path):
    cell = Cell((StrategyChoice("storage", "webdataset"),))
    storage = SimpleNamespace(shard_ranges=lambda path: [range(0, 100), range(100, 256), range(256, 512)])
    storageunits.note(cell.id, storage, tmp_path)
    assert storageunits.noted(cell.id) == (True, [range(0, 100), range(100, 256), range(256, 512)])
    spec = generator.DatasetSpec(samples=512, profile="tiny")
    line = cell_line(the_scenario(spec), cell, "V100 (emulated)", True, sequential_ranks(512, 8, 6, 2), 1.0)
    assert line["order"]["unit"] == "shards" and line["order"]["units"] == 3 and line["order"]["classes"] == 0
    assert "order_label_tv" not in line["figures"]  # no classes
    # rank 0 reads 16..63 (shard 0), rank 1 256 + 16.. (shard 2): one shard per batch; the ideal's, exactly:
    ideal = sum(1 - oq.miss_probability(512, n, 8) for n in (100, 156, 256))
    assert line["figures"]["order_units_ideal"] == pytest.approx(ideal, abs=1e-6)
    assert storageunits.units_of(SimpleNamespace(), tmp_path) is None  # a storage without units


def test_a_failed_cell_or_one_without_a_recorded_order_has_none():
    cell = Cell((StrategyChoice("storage", "raw"),))
    ranks = sequential_ranks(64, 4, 2, 1)
    ranks[1].error = "OOM: too big"
    line = cell_line(the_scenario(SimpleNamespace(samples=64)), cell, "V100 (emulated)", True, ranks, 1.0)
    assert "order" not in line and not any(k.startswith("order_") for k in line["figures"])
    ranks = [rank_record(0, {}, [4, 4])]  # nothing consumed: no order recorded
    line = cell_line(the_scenario(SimpleNamespace(samples=64)), cell, "V100 (emulated)", True, ranks, 1.0)
    assert "order" not in line


@pytest.mark.parametrize("path", ["cells_schema2.jsonl", "cells_4xV100.jsonl"])
def test_an_old_line_without_order_figures_reads_and_round_trips(path):
    for text in (FIXTURES / path).read_text().splitlines():
        line = json.loads(text)
        r = CellResult.from_json(line)
        assert r.order is None and r.figures.order_units_ratio is None
        assert r.to_json() == line


def test_class_labels_are_clusters_in_storage_order_and_learnable():
    spec = generator.DatasetSpec(samples=100, profile="tiny", classes=4)
    labels = generator.class_labels(spec)
    assert labels.tolist() == [i * 4 // 100 for i in range(100)] and np.all(np.diff(labels) >= 0)
    assert np.bincount(labels).tolist() == [25, 25, 25, 25]
    centroids = np.stack([generator.class_centroid(spec, k) for k in range(4)])
    nearest = [int(np.argmax(centroids @ generator.generate_sample(spec, i).image_emb)) for i in range(0, 100, 5)]
    assert nearest == labels[::5].tolist()  # the class is in the features
    assert generator.class_labels(generator.DatasetSpec(samples=10)) is None


def test_without_classes_the_data_and_its_key_are_unchanged():
    """The key and the samples of a dataset without classes are those the generator wrote before classes."""
    spec = generator.DatasetSpec(samples=64, profile="tiny", seed=3)
    assert spec.key() == "a112972ff32c" and "classes" not in spec.to_dict()
    with_classes = generator.DatasetSpec(samples=64, profile="tiny", seed=3, classes=4)
    assert with_classes.key() != spec.key() and with_classes.to_dict()["classes"] == 4
    plain, clustered = generator.generate_sample(spec, 5), generator.generate_sample(with_classes, 5)
    assert plain.caption == clustered.caption and np.array_equal(plain.text_emb, clustered.text_emb)
    assert not np.array_equal(plain.image_emb, clustered.image_emb)


GOOD = """
[hardware]
accelerator = "V100-16GB"
count = 2
[dataset]
samples = 100
profile = "tiny"
{classes}
[training]
batch_size = 4
steps = 3
[matrix]
storage = ["mmap"]
"""


def test_the_scenario_option_reaches_the_dataset(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text(GOOD.format(classes="classes = 10"))
    assert scenario.load(str(path)).dataset.classes == 10
    path.write_text(GOOD.format(classes=""))
    assert scenario.load(str(path)).dataset.classes == 0


@pytest.mark.parametrize("value, message", [
    ("1", r"\[dataset\] classes = 1 must be 0 \(no classes\) or 2 to 100"),
    ("-3", r"\[dataset\] classes = -3 must be 0"),
    ("101", r"\[dataset\] classes = 101 must be 0 \(no classes\) or 2 to 100"),
    ('"ten"', r"\[dataset\] classes = 'ten' must be of type int"),
])
def test_a_bad_classes_value_is_one_line(tmp_path, value, message):
    path = tmp_path / "s.toml"
    path.write_text(GOOD.format(classes=f"classes = {value}"))
    with pytest.raises(UsageError, match=message) as err:
        scenario.load(str(path))
    assert "\n" not in str(err.value)


def test_classes_on_an_imported_source_is_refused(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text(GOOD.format(classes='classes = 4\nsource = "somewhere"').replace("samples = 100\n", ""))
    with pytest.raises(UsageError, match=r"classes applies to a generated dataset only"):
        scenario.load(str(path))


def test_a_bad_classes_value_exits_2_before_any_data(tmp_path, capsys):
    path = tmp_path / "s.toml"
    path.write_text(GOOD.format(classes="classes = 1"))
    data = tmp_path / "data"
    code = cli.main(["--scenario", str(path), "--dry-run", "--data-dir", str(data), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "classes = 1 must be 0" in err
    assert not data.exists()


@pytest.mark.parametrize("name, params, size", [("webdataset", {"shard_size": 16}, 16),
                                                ("parquet", {"row_group_size": 24}, 24)])
def test_a_real_materialisations_units_are_its_shards(tmp_path, name, params, size):
    """What the pipeline notes for a storage with units: its shards as written (here 100 samples)."""
    from strategies import registry

    spec = generator.DatasetSpec(samples=100, profile="tiny", content="features")
    storage = registry.create("storage", name, **params)
    storage.write(generator.iter_samples(spec), tmp_path, 100)
    assert storageunits.units_of(storage, tmp_path) == [range(a, min(a + size, 100)) for a in range(0, 100, size)]
    assert storageunits.units_of(registry.create("storage", "mmap"), tmp_path) is None  # no units of its own


@pytest.mark.slow
def test_a_real_run_writes_its_order_figures(smoke_run):
    """The smoke run (2 ranks, default sampler, no classes): every line has each rank's order, the default
    sampler's decided as a shuffle on units and position."""
    from harness.report.tables import order_decisions

    _, _, results = smoke_run
    assert results and all(r.measured for r in results)
    for r in results:
        assert r.order.unit == "blocks of 64" and [x.rank for x in r.order.ranks] == [0, 1]
        assert r.order.ranks[0].batches == len([n for n in r.ranks[0].batch_sizes if n])
        assert r.figures.order_label_tv is None  # no classes
        d = order_decisions(r.figures)
        assert d["units"] == oq.AS_SHUFFLE and d["position"] == oq.AS_SHUFFLE
