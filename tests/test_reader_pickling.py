"""A used reader pickles small: no memory map (nor anything that grows with the dataset) travels in it.

The rank reads ``stored_bytes()`` before its DataLoader starts, and a spawned (or forkserver) worker gets
the reader by pickle: a memory-mapped array in it would arrive as a full copy of its data instead of being
mapped again, lazily, in the worker.
"""
from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from strategies import registry
from strategies.sample import IMAGE_EMB_DIM, TEXT_EMB_DIM, Sample

STORAGES = ("raw", "mmap", "hdf5", "webdataset", "parquet", "lmdb")
SMALL, LARGE = 32, 512  # samples; stored_bytes is 256 and 4096 bytes
REPO = Path(__file__).resolve().parent.parent


def _samples(count: int):
    """Cheap, distinct samples (variable-length jpeg and caption), the same for every storage."""
    for i in range(count):
        yield Sample(i, b"\xff\xd8" + bytes([i % 251]) * (1 + i % 13), f"caption {i} " + "x" * (i % 7),
                     np.full(IMAGE_EMB_DIM, i, dtype=np.float32), np.full(TEXT_EMB_DIM, -i, dtype=np.float32))


def _opened(name: str, root: Path, count: int):
    """A reader over ``count`` samples with every lazy map open: a batch read and stored_bytes touched."""
    storage = registry.create("storage", name)
    path = root / f"{name}-{count:04d}"  # same name length for both sizes
    storage.write(_samples(count), path, count)
    reader = storage.open(path)
    reader.read_batch([0, count - 1, 5])
    assert int(reader.stored_bytes().sum()) > 0
    return reader


@pytest.fixture(scope="module")
def readers(tmp_path_factory):
    root = tmp_path_factory.mktemp("pickling")
    made = {(name, n): _opened(name, root, n) for name in STORAGES for n in (SMALL, LARGE)}
    yield made
    for reader in made.values():
        reader.close()


def _same(a: list[Sample], b: list[Sample]) -> bool:
    return [s.index for s in a] == [s.index for s in b] and all(x.same_as(y) for x, y in zip(a, b))


@pytest.mark.parametrize("name", STORAGES)
def test_pickled_reader_does_not_grow_with_the_dataset(name, readers):
    small, large = readers[name, SMALL], readers[name, LARGE]
    n_small, n_large = len(pickle.dumps(small)), len(pickle.dumps(large))
    stored = large.stored_bytes().nbytes
    assert stored == 8 * LARGE
    # before the fix the large reader's pickle held its whole stored_bytes: ~3.8 KB more than the small one's
    assert abs(n_large - n_small) <= 16, (n_small, n_large)
    assert n_large < stored // 2, (n_large, stored)


@pytest.mark.parametrize("name", STORAGES)
def test_unpickled_reader_returns_the_same_samples(name, readers):
    reader = readers[name, LARGE]
    clone = pickle.loads(pickle.dumps(reader))
    try:
        idx = [LARGE - 1, 0, 7, 7, 300]
        assert _same(clone.read_batch(idx), reader.read_batch(idx))
        assert np.array_equal(clone.stored_bytes(), reader.stored_bytes())
        assert _same(reader.read_batch([1, 2]), list(_samples(3))[1:])  # the original still reads
    finally:
        clone.close()


_CHILD = """
import pickle, sys
readers = pickle.loads(sys.stdin.buffer.read())
out = {name: ([(s.index, s.jpeg, s.caption, s.image_emb.tolist(), s.text_emb.tolist())
               for s in r.read_batch([3, 0, 511])], r.stored_bytes().tolist()) for name, r in readers.items()}
sys.stdout.buffer.write(pickle.dumps(out))
"""


@pytest.mark.slow  # reads in a fresh process
def test_unpickled_readers_read_in_a_fresh_process(readers):
    """What a spawned DataLoader worker does: unpickle the used readers in a new interpreter and read."""
    used = {name: readers[name, LARGE] for name in STORAGES}
    proc = subprocess.run([sys.executable, "-c", _CHILD], input=pickle.dumps(used), capture_output=True,
                          cwd=REPO, timeout=60)
    assert proc.returncode == 0, proc.stderr.decode()
    got = pickle.loads(proc.stdout)
    for name, reader in used.items():
        want = [(s.index, s.jpeg, s.caption, s.image_emb.tolist(), s.text_emb.tolist())
                for s in reader.read_batch([3, 0, 511])]
        assert got[name] == (want, reader.stored_bytes().tolist()), name
