"""A run's --target prediction uses the requests a remote storage keeps in flight (its own default included),
so that the target table's latency bound is the one `run_bench.py check-remote` checks; local files keep 1."""
from __future__ import annotations

from types import SimpleNamespace

from harness.report import stagetable
from strategies import registry


def cell(storage: str, params: dict):
    return SimpleNamespace(name=lambda axis: storage if axis == "storage" else "", params={"storage": params})


def test_a_remote_cell_reads_with_its_storage_s_in_flight_and_local_files_with_one():
    registry.load_builtins()
    url = {"url": "s3://dlbench/data", "format": "parquet"}
    assert stagetable.in_flight(cell("s3", {**url, "in_flight": 8})) == 8
    assert stagetable.in_flight(cell("s3", url)) == registry.create("storage", "s3", **url).in_flight == 4
    assert stagetable.in_flight(cell("mmap", {})) == 1
    assert stagetable.in_flight(cell("s3", {"url": "not-a-bucket"})) == 1  # cannot be built: the serial model
