"""The three storages on real files: same samples back, lazy per-process handles, reuse."""
from __future__ import annotations

import os
import pickle
import random

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from harness.dataset import DatasetSpec, generate_sample
from harness.errors import UsageError
from harness.materialise import load_manifest, materialise
from strategies import registry
from strategies.protocols import Reader, Storage
from strategies.sample import FIELDS

STORAGES = ("raw", "mmap", "hdf5")
SPEC = DatasetSpec(samples=50, seed=7, profile="tiny")


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("data")


@pytest.fixture(scope="module")
def paths(data_dir):
    return {name: materialise(SPEC, name, data_dir, progress=False) for name in STORAGES}


@pytest.fixture(scope="module")
def expected():
    return [generate_sample(SPEC, i) for i in range(SPEC.samples)]


def _indices():
    rng = random.Random(1)
    idx = [rng.randrange(SPEC.samples) for _ in range(40)] + [0, SPEC.samples - 1, 3, 3]
    rng.shuffle(idx)
    assert len(set(idx)) < len(idx)  # duplicates present
    return idx


def test_all_builtin_storages_are_registered():
    assert set(STORAGES) <= set(registry.names("storage"))


@pytest.mark.parametrize("name", STORAGES)
def test_storage_and_reader_satisfy_the_protocol(name, paths):
    storage = registry.create("storage", name)
    assert isinstance(storage, Storage) and storage.name == name
    reader = storage.open(paths[name])
    assert isinstance(reader, Reader) and len(reader) == SPEC.samples
    reader.close()


def test_hdf5_checks_chunk_rows():
    with pytest.raises(ValueError, match="chunk_rows must be an integer >= 1, got 0"):
        registry.create("storage", "hdf5", chunk_rows=0)


@pytest.mark.parametrize("name", STORAGES)
def test_read_batch_returns_generated_samples_in_order(name, paths, expected):
    reader = registry.create("storage", name).open(paths[name])
    try:
        assert len(reader) == SPEC.samples
        idx = _indices()
        got = reader.read_batch(idx)
        assert [s.index for s in got] == idx
        for s in got:
            assert s.same_as(expected[s.index])
        assert reader.read_batch([]) == []
        with pytest.raises(IndexError):
            reader.read_batch([SPEC.samples])
    finally:
        reader.close()


def test_all_storages_return_identical_samples(paths):
    idx = _indices()
    batches = {}
    for name in STORAGES:
        reader = registry.create("storage", name).open(paths[name])
        batches[name] = reader.read_batch(idx)
        reader.close()
    for a, b, c in zip(*batches.values()):
        assert a.same_as(b) and b.same_as(c)


@pytest.mark.parametrize("name", STORAGES)
def test_stored_bytes_are_per_sample_and_plausible(name, paths, expected):
    reader = registry.create("storage", name).open(paths[name])
    sizes = reader.stored_bytes()
    assert len(sizes) == SPEC.samples
    for n, s in zip(sizes, expected):
        assert n >= s.nbytes * 0.99
        assert n <= s.nbytes + 4096
    reader.close()


@pytest.mark.parametrize("name", STORAGES)
def test_fields_restriction_reads_only_requested_fields(name, paths, expected):
    storage = registry.create("storage", name)
    reader = storage.open(paths[name], fields=("image_emb", "text_emb"))
    got = reader.read_batch([5, 1, 5])
    for s in got:
        assert s.jpeg is None and s.caption is None
        assert np.array_equal(s.image_emb, expected[s.index].image_emb)
        assert np.array_equal(s.text_emb, expected[s.index].text_emb)
    reader.close()
    reader = storage.open(paths[name], fields=("caption",))
    (s,) = reader.read_batch([9])
    assert s.caption == expected[9].caption
    assert s.jpeg is None and s.image_emb is None and s.text_emb is None
    reader.close()
    with pytest.raises(ValueError):
        storage.open(paths[name], fields=("pixels",))


def test_restricted_raw_reader_does_not_touch_other_fields(paths, tmp_path, expected):
    # Prove "not read from disk": remove the jpeg files of a copy and read embeddings only.
    import shutil

    copy = tmp_path / "raw"
    shutil.copytree(paths["raw"], copy)
    for p in copy.rglob("*.jpg"):
        p.unlink()
    reader = registry.create("storage", "raw").open(copy, fields=("image_emb", "text_emb", "caption"))
    (s,) = reader.read_batch([4])
    assert s.caption == expected[4].caption and s.jpeg is None


def test_restricted_mmap_reader_does_not_touch_other_fields(paths, tmp_path, expected):
    import shutil

    mm = tmp_path / "mmap"
    shutil.copytree(paths["mmap"], mm)
    (mm / "jpeg.bin").unlink()
    (mm / "caption.bin").unlink()
    reader = registry.create("storage", "mmap").open(mm, fields=("image_emb", "text_emb"))
    (s,) = reader.read_batch([4])
    assert np.array_equal(s.image_emb, expected[4].image_emb)


@pytest.mark.parametrize("name", STORAGES)
def test_reader_opens_nothing_before_use_and_survives_pickling(name, paths, expected):
    reader = registry.create("storage", name).open(paths[name])
    # Nothing opened in the constructor: a fresh pickle carries no open handle.
    clone = pickle.loads(pickle.dumps(reader))
    assert clone.read_batch([2])[0].same_as(expected[2])
    # A used reader still pickles, and the clone reopens its own handles.
    reader.read_batch([1, 2])
    clone2 = pickle.loads(pickle.dumps(reader))
    got = clone2.read_batch([8, 0, 8])
    assert all(s.same_as(expected[s.index]) for s in got)
    reader.close()
    clone.close()
    clone2.close()


class _BatchDataset(Dataset):
    def __init__(self, reader):
        self.reader = reader

    def __len__(self):
        return len(self.reader)

    def __getitems__(self, indices):
        return [(s.index, os.getpid(), s.jpeg, torch.from_numpy(s.image_emb)) for s in self.reader.read_batch(indices)]

    def __getitem__(self, i):  # pragma: no cover - DataLoader uses __getitems__
        return self.__getitems__([i])[0]


def _collate(items):
    return items


@pytest.mark.slow
@pytest.mark.parametrize("name", STORAGES)
def test_reader_works_in_forked_dataloader_workers_after_parent_use(name, paths, expected):
    reader = registry.create("storage", name).open(paths[name])
    reader.read_batch([0, 1])  # the parent opened its handles before the fork
    loader = DataLoader(
        _BatchDataset(reader),
        batch_size=8,
        shuffle=True,
        generator=torch.Generator().manual_seed(0),
        num_workers=2,
        multiprocessing_context="fork",
        collate_fn=_collate,
    )
    seen, pids = [], set()
    for batch in loader:
        for index, pid, jpeg, emb in batch:
            assert jpeg == expected[index].jpeg
            assert np.array_equal(emb.numpy(), expected[index].image_emb)
            seen.append(index)
            pids.add(pid)
    assert sorted(seen) == list(range(SPEC.samples))
    assert os.getpid() not in pids and len(pids) == 2
    # The parent still reads after its workers forked.
    assert reader.read_batch([3])[0].same_as(expected[3])
    reader.close()


@pytest.mark.parametrize("name", STORAGES)
def test_materialise_reuses_a_finished_directory(name, paths, data_dir):
    path = paths[name]
    assert path == data_dir / f"{SPEC.key()}-{name}"
    manifest = load_manifest(path)
    assert manifest["storage"] == name and manifest["count"] == SPEC.samples
    assert manifest["spec"] == SPEC.to_dict() and manifest["key"] == SPEC.key()
    assert manifest["total_bytes"] == sum(manifest["files"].values())
    assert manifest["checksum"].startswith("sha256:")
    mtime = (path / "manifest.json").stat().st_mtime_ns
    files = registry.create("storage", name).files(path)
    before = {p: p.stat().st_mtime_ns for p in files}
    again = materialise(SPEC, name, data_dir, progress=False)
    assert again == path
    assert (path / "manifest.json").stat().st_mtime_ns == mtime
    assert {p: p.stat().st_mtime_ns for p in files} == before
    assert not [p for p in data_dir.iterdir() if ".tmp-" in p.name]


def test_materialise_regenerates_a_directory_without_manifest(tmp_path, capsys):
    spec = DatasetSpec(samples=5, profile="tiny")
    path = materialise(spec, "mmap", tmp_path, progress=True)
    assert "materialise mmap" in capsys.readouterr().err
    (path / "manifest.json").unlink()
    path2 = materialise(spec, "mmap", tmp_path, progress=False)
    assert path2 == path and load_manifest(path)["count"] == 5
    reader = registry.create("storage", "mmap").open(path)
    assert reader.read_batch([4])[0].same_as(generate_sample(spec, 4))


def test_unwritable_data_dir_is_a_usage_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(UsageError, match="not writable"):
        materialise(DatasetSpec(samples=3, profile="tiny"), "raw", blocker / "sub", progress=False)


def test_unknown_storage_is_reported(tmp_path):
    with pytest.raises(registry.UnknownStrategy):
        materialise(DatasetSpec(samples=3, profile="tiny"), "tape", tmp_path, progress=False)


def test_default_fields_are_all_fields(paths):
    reader = registry.create("storage", "hdf5").open(paths["hdf5"])
    assert tuple(reader.fields) == FIELDS
