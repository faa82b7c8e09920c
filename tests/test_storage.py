"""The three storages on real files: same samples back, lazy per-process handles, reuse."""
from __future__ import annotations

import json
import pickle
import random

import numpy as np
import pytest
from forked_readers import check_forked_workers

from harness.data.generator import DatasetSpec, generate_sample
from harness.data.materialise import load_manifest, materialise
from harness.errors import UsageError
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


@pytest.mark.slow
@pytest.mark.parametrize("name", STORAGES)
def test_reader_works_in_forked_dataloader_workers_after_parent_use(name, paths, expected):
    reader = registry.create("storage", name).open(paths[name])
    check_forked_workers(reader, expected)
    reader.close()


@pytest.mark.parametrize("name", STORAGES)
def test_materialise_reuses_a_finished_directory(name, paths, data_dir):
    path = paths[name]
    # <key>-<name>, or <key>-<name><variant> once materialise keys a storage's variant (hdf5's layout)
    variant = registry.create("storage", name).variant
    assert path in (data_dir / f"{SPEC.key()}-{name}", data_dir / f"{SPEC.key()}-{name}{variant}")
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


# ---- batched reads: hdf5 layouts, preallocated buffers, memory-mapped indexes ----

HDF5_VARIANTS = {
    "contiguous": {"layout": "contiguous"},
    "chunked": {"layout": "chunked"},
    "chunked7": {"layout": "chunked", "chunk_rows": 7},
    "chunked4-gzip": {"layout": "chunked", "chunk_rows": 4, "compression": "gzip"},
}


@pytest.fixture(scope="module")
def hdf5_paths(data_dir):
    """Every hdf5 variant written straight through its storage (one directory each)."""
    from harness.data.generator import iter_samples

    out = {}
    for label, params in HDF5_VARIANTS.items():
        storage = registry.create("storage", "hdf5", **params)
        path = data_dir / f"layouts-hdf5{storage.variant}"
        storage.write(iter_samples(SPEC), path, SPEC.samples)
        out[label] = (storage, path)
    return out


def _unsorted_with_duplicates():
    idx = [31, 2, 49, 2, 0, 17, 31, 31, 8, 48, 1, 17]
    assert idx != sorted(idx) and len(set(idx)) < len(idx)
    return idx


def test_hdf5_variants_name_their_files():
    assert registry.create("storage", "hdf5").variant == "-contiguous"
    assert registry.create("storage", "hdf5", layout="chunked").variant == "-chunked16"
    assert registry.create("storage", "hdf5", layout="chunked", chunk_rows=4,
                           compression="gzip").variant == "-chunked4-gzip"
    assert registry.create("storage", "raw").variant == "" and registry.create("storage", "mmap").variant == ""


def test_hdf5_checks_layout_parameters():
    with pytest.raises(ValueError, match="layout must be one of"):
        registry.create("storage", "hdf5", layout="striped")
    with pytest.raises(ValueError, match="compression must be one of"):
        registry.create("storage", "hdf5", layout="chunked", compression="lz4")
    with pytest.raises(ValueError, match="chunked"):
        registry.create("storage", "hdf5", layout="contiguous", chunk_rows=8)
    with pytest.raises(ValueError, match="chunked"):
        registry.create("storage", "hdf5", compression="gzip")


@pytest.mark.parametrize("fields", [FIELDS, ("image_emb", "text_emb"), ("jpeg", "caption"), ("text_emb",)])
def test_every_storage_and_layout_reads_identical_samples(paths, hdf5_paths, expected, fields):
    idx = _unsorted_with_duplicates()
    readers = [registry.create("storage", n).open(paths[n], fields=fields) for n in STORAGES]
    readers += [storage.open(path, fields=fields) for storage, path in hdf5_paths.values()]
    try:
        for reader in readers:
            got = reader.read_batch(idx)
            assert [s.index for s in got] == idx
            for s in got:
                for f in FIELDS:
                    value, want = getattr(s, f), getattr(expected[s.index], f)
                    if f not in fields:
                        assert value is None
                    elif f.endswith("_emb"):
                        assert value.dtype == np.float32 and np.array_equal(value, want)
                    else:
                        assert value == want
    finally:
        for reader in readers:
            reader.close()


@pytest.mark.parametrize("name", STORAGES + tuple(f"hdf5:{v}" for v in HDF5_VARIANTS))
def test_batch_buffers_give_duplicates_their_own_rows(name, paths, hdf5_paths, expected):
    if name.startswith("hdf5:"):
        storage, path = hdf5_paths[name.split(":", 1)[1]]
        reader = storage.open(path, fields=("image_emb", "text_emb"))
    else:
        reader = registry.create("storage", name).open(paths[name], fields=("image_emb", "text_emb"))
    got = reader.read_batch([9, 3, 9])
    got[0].image_emb[:] = -1.0  # a consumer writing into one sample's row
    assert np.array_equal(got[2].image_emb, expected[9].image_emb)
    assert np.array_equal(got[1].image_emb, expected[3].image_emb)
    assert got[1].image_emb.shape == (2048,) and got[1].text_emb.shape == (768,)
    owned = got[1].detached()
    assert owned.same_as(got[1]) and owned.image_emb.flags.owndata
    reader.close()


def test_contiguous_hdf5_is_read_through_a_memory_map(hdf5_paths):
    from strategies.storage import hdf5

    storage, path = hdf5_paths["contiguous"]
    reader = storage.open(path)
    reader.read_batch([1, 2])
    maps = reader._h.get()
    assert maps.files and all(not a.flags.owndata for a in maps.arrays.values() if a.ndim)
    assert reader not in hdf5._OPEN_READERS  # no h5py handle stays open
    reader.close()


def test_hdf5_refuses_a_directory_of_another_variant(hdf5_paths, paths):
    storage, path = hdf5_paths["chunked7"]
    with pytest.raises(ValueError, match="hdf5-chunked7, not the hdf5-contiguous"):
        registry.create("storage", "hdf5").open(path)
    # A directory written before layouts existed (no variant in meta.json) holds chunked16 files.
    legacy = path.parent / "legacy-hdf5"
    import shutil

    shutil.copytree(hdf5_paths["chunked"][1], legacy)
    meta = json.loads((legacy / "meta.json").read_text())
    del meta["variant"], meta["layout"]
    (legacy / "meta.json").write_text(json.dumps(meta))
    reader = registry.create("storage", "hdf5", layout="chunked").open(legacy)
    assert reader.layout == "chunked" and len(reader.read_batch([4])) == 1
    reader.close()
    with pytest.raises(ValueError, match="--regenerate"):
        registry.create("storage", "hdf5").open(legacy)


@pytest.mark.parametrize("name", STORAGES)
def test_stored_bytes_are_memory_mapped(name, paths):
    reader = registry.create("storage", name).open(paths[name])
    sizes = reader.stored_bytes()
    assert isinstance(sizes, np.ndarray) and not sizes.flags.owndata and not sizes.flags.writeable
    clone = pickle.loads(pickle.dumps(reader))  # the mapped array does not travel
    assert clone._stored is None
    reader.close()


def test_mmap_computes_stored_bytes_without_the_sidecar(paths, tmp_path):
    import shutil

    copy = tmp_path / "mmap-old"
    shutil.copytree(paths["mmap"], copy)
    (copy / "stored_bytes.npy").unlink()
    storage = registry.create("storage", "mmap")
    reader = storage.open(copy)
    fresh = storage.open(paths["mmap"])
    assert np.array_equal(reader.stored_bytes(), fresh.stored_bytes())
    assert "stored_bytes.npy" not in [p.name for p in storage.files(copy)]
    reader.close()
    fresh.close()


def test_raw_reads_past_a_too_small_bound_and_checks_embedding_sizes(paths, tmp_path, expected):
    import shutil

    from strategies.storage.raw import RawReader

    reader = RawReader(paths["raw"])
    fd = reader._dir.get().fd
    stem = "00000/00000004"
    assert reader._read_whole(fd, [stem], "jpeg", [1]) == [expected[4].jpeg]
    reader.close()
    copy = tmp_path / "raw-cut"
    shutil.copytree(paths["raw"], copy)
    with open(copy / "00000" / "00000004.img.f32", "r+b") as f:
        f.truncate(100)
    cut = registry.create("storage", "raw").open(copy, fields=("image_emb",))
    with pytest.raises(ValueError, match="100 bytes, expected 8192"):
        cut.read_batch([4])
    cut.close()
