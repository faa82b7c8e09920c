"""Read-path microbenchmarks of the webdataset, parquet, lmdb and litdata storages (opt-in, like the others here;
see tests/benchmarks/README.md), on the same 512-sample dataset and warm page cache as test_read_paths.py
(litdata when its extra is installed).

Groups:

* ``storage-read-bs{8,32,128}``: ``read_batch`` of a fixed random batch, the same groups as raw, mmap and hdf5
  in test_read_paths.py, so one comparison table holds all seven storages;
* ``epoch-read-<storage>``: one rank's epoch (rank 0 of 2: 256 samples) read in batches of 32 in the order of
  the ``default`` sampler (random) and of the ``shards`` sampler (whole shards of 64, shuffle buffer 128), for
  every storage: what shard streaming saves on each format (most on parquet, which reads whole row groups).
"""
from __future__ import annotations

import importlib.util

import pytest

from strategies import registry
from tests.benchmarks.test_read_paths import BATCH_SIZES, STEADY, check_samples

NEW_STORAGES = ("webdataset", "parquet", "lmdb") + \
    (("litdata",) if importlib.util.find_spec("litdata") is not None else ())
ALL_STORAGES = ("raw", "mmap", "hdf5") + NEW_STORAGES
EPOCH_BATCH = 32
WORLD, RANK, SEED, EPOCH = 2, 0, 0, 1


@pytest.mark.parametrize("batch_size", BATCH_SIZES, ids=lambda n: f"bs{n}")
@pytest.mark.parametrize("storage", NEW_STORAGES)
@pytest.mark.benchmark(**STEADY)
def test_format_read(benchmark, bench_data, storage, batch_size):
    reader = bench_data.open(storage)
    indices = bench_data.indices(batch_size)
    benchmark.group = f"storage-read-bs{batch_size}"
    benchmark.extra_info.update(storage=storage, batch_size=batch_size, samples=len(reader))
    batch = benchmark(reader.read_batch, indices)
    assert len(batch) == batch_size
    check_samples(bench_data, batch, indices)


def _epoch_order(sampler: str, size: int) -> list[int]:
    s = registry.create("sampler", sampler).sampler(size, WORLD, RANK, SEED, None, EPOCH_BATCH)
    s.set_epoch(EPOCH)
    return list(s)


@pytest.mark.parametrize("sampler", ("default", "shards"))
@pytest.mark.parametrize("storage", ALL_STORAGES)
@pytest.mark.benchmark(warmup=True, warmup_iterations=2, min_rounds=10, max_time=2.0)
def test_epoch_read(benchmark, bench_data, storage, sampler):
    reader = bench_data.open(storage)
    order = _epoch_order(sampler, len(reader))
    batches = [order[a:a + EPOCH_BATCH] for a in range(0, len(order), EPOCH_BATCH)]
    benchmark.group = f"epoch-read-{storage}"
    benchmark.extra_info.update(storage=storage, sampler=sampler, samples=len(order), batch_size=EPOCH_BATCH)

    def epoch():
        return [reader.read_batch(b) for b in batches]

    got = benchmark(epoch)
    assert [s.index for batch in got for s in batch] == order
    for b, batch in zip(batches[:2], got[:2]):  # what was read is the dataset's (two batches suffice here)
        check_samples(bench_data, batch, b)
