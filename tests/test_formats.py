"""The webdataset, parquet, lmdb and litdata storages on real files: the same samples back as the generator (and
as raw, mmap, hdf5), requested fields only, per-process handles, shard structure, and files other tools can read
(litdata's: when the litdata extra is installed; without it, selecting the storage is one line)."""
from __future__ import annotations

import importlib.util
import io
import pickle
import random
import tarfile

import lmdb
import numpy as np
import pyarrow.parquet as pq
import pytest
from forked_readers import check_forked_workers

from harness.data.generator import DatasetSpec, generate_sample, iter_samples
from harness.data.materialise import load_manifest, materialise
from strategies import registry
from strategies.protocols import Reader, Storage
from strategies.sample import FIELDS

HAS_LITDATA = importlib.util.find_spec("litdata") is not None
NEW = ("webdataset", "parquet", "lmdb") + (("litdata",) if HAS_LITDATA else ())
needs_litdata = pytest.mark.skipif(not HAS_LITDATA,
                                   reason="the litdata extra is not installed: pip install -e '.[litdata]'")
OLD = ("raw", "mmap", "hdf5")
SPEC = DatasetSpec(samples=50, seed=7, profile="tiny")


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("data")


@pytest.fixture(scope="module")
def paths(data_dir):
    made = {name: materialise(SPEC, name, data_dir, progress=False) for name in NEW + OLD}
    return made


@pytest.fixture(scope="module")
def small_shards(tmp_path_factory):
    """webdataset with 8 samples per shard and parquet with 8 rows per group (7 shards for 50 samples)."""
    root = tmp_path_factory.mktemp("small")
    out = {}
    small = [("webdataset", {"shard_size": 8}), ("parquet", {"row_group_size": 8})]
    for name, params in small + ([("litdata", {"chunk_size": 8})] if HAS_LITDATA else []):
        storage = registry.create("storage", name, **params)
        storage.write(iter_samples(SPEC), root / name, SPEC.samples)
        out[name] = (storage, root / name)
    return out


@pytest.fixture(scope="module")
def expected():
    return [generate_sample(SPEC, i) for i in range(SPEC.samples)]


def _indices():
    rng = random.Random(1)
    idx = [rng.randrange(SPEC.samples) for _ in range(40)] + [0, SPEC.samples - 1, 3, 3]
    rng.shuffle(idx)
    return idx


def _open(name, paths, small_shards, small, fields=FIELDS):
    if small:
        storage, path = small_shards[name]
        return storage.open(path, fields)
    return registry.create("storage", name).open(paths[name], fields)


SMALL = ("webdataset", "parquet") + (("litdata",) if HAS_LITDATA else ())
CASES = [(n, False) for n in NEW] + [(n, True) for n in SMALL]
IDS = [n for n in NEW] + [f"{n}-8" for n in SMALL]


def test_new_storages_are_registered_and_satisfy_the_protocol(paths):
    assert set(NEW) <= set(registry.names("storage"))
    for name in NEW:
        storage = registry.create("storage", name)
        assert isinstance(storage, Storage) and storage.name == name
        reader = storage.open(paths[name])
        assert isinstance(reader, Reader) and len(reader) == SPEC.samples
        reader.close()


@pytest.mark.parametrize("name, small", CASES, ids=IDS)
def test_read_batch_returns_generated_samples_in_order(name, small, paths, small_shards, expected):
    reader = _open(name, paths, small_shards, small)
    try:
        idx = _indices()
        got = reader.read_batch(idx)
        assert [s.index for s in got] == idx
        assert all(s.same_as(expected[s.index]) for s in got)
        assert reader.read_batch([]) == []
        assert [s.index for s in reader.read_batch(range(SPEC.samples))] == list(range(SPEC.samples))
        with pytest.raises(IndexError):
            reader.read_batch([SPEC.samples])
        with pytest.raises(IndexError):
            reader.read_batch([-1])
        # embeddings are owned, writable float32 copies (a cache may keep them; a model may write to them)
        s = got[0]
        assert s.image_emb.dtype == np.float32 and s.image_emb.flags.writeable and s.image_emb.flags.owndata
    finally:
        reader.close()


def test_all_storages_return_identical_samples(paths):
    idx = _indices()
    batches = []
    for name in NEW + OLD:
        reader = registry.create("storage", name).open(paths[name])
        batches.append(reader.read_batch(idx))
        reader.close()
    for row in zip(*batches):
        assert all(row[0].same_as(other) for other in row[1:])


@pytest.mark.parametrize("name, small", CASES, ids=IDS)
def test_fields_restriction_reads_only_requested_fields(name, small, paths, small_shards, expected):
    for fields in (("image_emb", "text_emb"), ("jpeg", "caption"), ("caption",), ("text_emb", "jpeg"), ()):
        reader = _open(name, paths, small_shards, small, fields)
        for s in reader.read_batch([5, 1, 5, 49]):
            for field in FIELDS:
                value, want = getattr(s, field), getattr(expected[s.index], field)
                if field in fields:
                    assert (np.array_equal(value, want) if field.endswith("emb") else value == want), field
                else:
                    assert value is None, field
        reader.close()
    with pytest.raises(ValueError):
        _open(name, paths, small_shards, small, ("pixels",))


@pytest.mark.parametrize("name", NEW)
def test_stored_bytes_are_per_sample_and_plausible(name, paths, expected):
    reader = registry.create("storage", name).open(paths[name])
    sizes = reader.stored_bytes()
    assert len(sizes) == SPEC.samples
    for n, s in zip(sizes, expected):
        assert s.nbytes <= n <= s.nbytes + 4 * 1024 + 256  # tar: a 512-byte header and padding per member
    reader.close()


@pytest.mark.parametrize("name, small", CASES, ids=IDS)
def test_reader_opens_nothing_before_use_and_survives_pickling(name, small, paths, small_shards, expected):
    reader = _open(name, paths, small_shards, small)
    clone = pickle.loads(pickle.dumps(reader))
    assert clone.read_batch([2])[0].same_as(expected[2])
    reader.read_batch([1, 2])
    clone2 = pickle.loads(pickle.dumps(reader))  # a used reader pickles; the clone opens its own handles
    assert all(s.same_as(expected[s.index]) for s in clone2.read_batch([8, 0, 8]))
    for r in (reader, clone, clone2):
        r.close()
    assert reader.read_batch([3])[0].same_as(expected[3])  # a closed reader reopens on its next read
    reader.close()


@pytest.mark.parametrize("name", NEW)
def test_materialise_writes_a_manifest_and_reuses_it(name, paths, data_dir):
    path = paths[name]
    manifest = load_manifest(path)
    assert manifest["storage"] == name and manifest["count"] == SPEC.samples
    assert manifest["total_bytes"] == sum(manifest["files"].values())
    files = registry.create("storage", name).files(path)
    assert all(p.is_file() for p in files)
    before = {p: p.stat().st_mtime_ns for p in files}
    assert materialise(SPEC, name, data_dir, progress=False, check="full") == path
    assert {p: p.stat().st_mtime_ns for p in files} == before


def test_parameters_are_checked():
    for name, key in (("webdataset", "shard_size"), ("parquet", "row_group_size")):
        with pytest.raises(ValueError, match=f"{key} must be an integer >= 1, got 0"):
            registry.create("storage", name, **{key: 0})
    with pytest.raises(ValueError, match="compression must be one of none, snappy, zstd"):
        registry.create("storage", "parquet", compression="lz4")
    with pytest.raises(TypeError):
        registry.create("storage", "lmdb", map_size=1)


# ---- webdataset ----


def test_webdataset_shards_are_plain_tars_in_index_order(small_shards, expected):
    storage, path = small_shards["webdataset"]
    shards = storage.shards(path)
    assert shards == [range(a, min(a + 8, 50)) for a in range(0, 50, 8)]
    tars = sorted(path.glob("*.tar"))
    assert len(tars) == len(shards) and set(tars) <= set(storage.files(path))
    for tar_path, shard in zip(tars, shards):
        with tarfile.open(tar_path) as tar:
            names = tar.getnames()
            assert names == [f"{i:08d}.{ext}" for i in shard
                             for ext in ("image_emb.npy", "jpg", "text_emb.npy", "txt")]
            i = shard.start
            assert tar.extractfile(f"{i:08d}.jpg").read() == expected[i].jpeg
            assert tar.extractfile(f"{i:08d}.txt").read().decode() == expected[i].caption
            text_emb = np.load(io.BytesIO(tar.extractfile(f"{i:08d}.text_emb.npy").read()))
            assert np.array_equal(text_emb, expected[i].text_emb)


def test_webdataset_package_reads_the_shards(small_shards, expected):
    """The files are WebDataset shards: the package's own sequential reader yields every sample."""
    import webdataset as wds

    _, path = small_shards["webdataset"]
    urls = [str(p) for p in sorted(path.glob("*.tar"))]
    seen = []
    for sample in wds.WebDataset(urls, shardshuffle=False):
        i = int(sample["__key__"])
        assert sample["jpg"] == expected[i].jpeg and sample["txt"].decode() == expected[i].caption
        seen.append(i)
    assert seen == list(range(SPEC.samples))


def test_webdataset_index_points_at_member_payloads(small_shards, expected):
    _, path = small_shards["webdataset"]
    index = np.load(path / "index.npy")
    assert index.shape == (SPEC.samples, 9)
    assert (index[:, 0] == np.arange(SPEC.samples) // 8).all()
    i = 19
    with open(path / f"shard-{index[i, 0]:05d}.tar", "rb") as f:
        f.seek(index[i, 1])
        assert f.read(index[i, 2]) == expected[i].jpeg
        f.seek(index[i, 5])  # image_emb: the raw float32 payload after the .npy header
        assert np.array_equal(np.frombuffer(f.read(index[i, 6]), "<f4"), expected[i].image_emb)


# ---- parquet ----


def test_parquet_row_groups_and_reads_per_group(small_shards, expected):
    storage, path = small_shards["parquet"]
    meta = pq.ParquetFile(path / "data.parquet").metadata
    assert meta.num_row_groups == 7 and meta.row_group(0).num_rows == 8 and meta.row_group(6).num_rows == 2
    assert storage.shards(path) == [range(a, min(a + 8, 50)) for a in range(0, 50, 8)]
    reader = storage.open(path, ("caption",))
    # a batch touching three row groups reads each once, however many of its rows it wants
    reader.read_batch([0, 9, 1, 17, 10, 2])
    assert reader.groups_read == 3
    # streaming in order reads every row group once (recent ones stay cached between batches)
    reader = storage.open(path, ("caption",))
    for a in range(0, 50, 5):
        reader.read_batch(range(a, min(a + 5, 50)))
    assert reader.groups_read == 7
    reader.close()
    # any Parquet reader sees the columns
    table = pq.read_table(path / "data.parquet", columns=["index", "txt", "text_emb"])
    assert table.column("index").to_pylist() == list(range(50))
    assert table.column("txt")[33].as_py() == expected[33].caption
    assert np.array_equal(np.asarray(table.column("text_emb")[33].as_py(), np.float32), expected[33].text_emb)


@pytest.mark.parametrize("compression", ("none", "zstd"))
def test_parquet_compressions_round_trip(compression, tmp_path, expected):
    storage = registry.create("storage", "parquet", row_group_size=16, compression=compression)
    storage.write(iter_samples(SPEC), tmp_path, SPEC.samples)
    reader = storage.open(tmp_path)
    assert all(s.same_as(expected[s.index]) for s in reader.read_batch([49, 0, 20]))
    codec = pq.ParquetFile(tmp_path / "data.parquet").metadata.row_group(0).column(1).compression
    assert codec == ("UNCOMPRESSED" if compression == "none" else "ZSTD")


# ---- lmdb ----


def test_lmdb_holds_one_key_per_sample_in_index_order(paths):
    env = lmdb.open(str(paths["lmdb"]), readonly=True, lock=False)
    with env.begin() as txn:
        keys = [bytes(k) for k, _ in txn.cursor()]
    env.close()
    assert keys == [b"%08d" % i for i in range(SPEC.samples)]


def test_lmdb_grows_its_map_when_the_estimate_is_too_small(tmp_path, monkeypatch, expected):
    import strategies.storage.lmdb as lmdb_storage

    monkeypatch.setattr(lmdb_storage, "MAP_BYTES_PER_SAMPLE", 512)  # far less than a sample: must grow
    monkeypatch.setattr(lmdb_storage, "MAP_MARGIN", 0)
    storage = registry.create("storage", "lmdb")
    storage.write(iter_samples(SPEC), tmp_path, SPEC.samples)
    reader = storage.open(tmp_path)
    assert all(s.same_as(expected[s.index]) for s in reader.read_batch(range(SPEC.samples)))


# ---- litdata ----


@needs_litdata
def test_litdata_chunks_are_litdatas_own_and_its_reader_streams_them(small_shards, expected):
    """The folder is a litdata dataset: its chunks are the storage's shards, and litdata's StreamingDataset
    iterated as litdata users do (no harness code) yields every sample in index order."""
    import litdata

    storage, path = small_shards["litdata"]
    assert storage.shards(path) == [range(a, min(a + 8, 50)) for a in range(0, 50, 8)]
    chunks = sorted(path.glob("chunk-*.bin"))
    assert len(chunks) == 7 and set(chunks) <= set(storage.files(path))
    seen = []
    for item in litdata.StreamingDataset(str(path)):
        i = int(item["index"])
        assert bytes(item["jpeg"]) == expected[i].jpeg and item["caption"] == expected[i].caption
        assert np.array_equal(np.asarray(item["text_emb"]), expected[i].text_emb)
        seen.append(i)
    assert seen == list(range(SPEC.samples))


@needs_litdata
def test_the_shards_sampler_keeps_its_contract_on_litdatas_chunks(small_shards):
    from tests.test_shards import check_contract, epoch_of

    storage, path = small_shards["litdata"]
    for world in (1, 2, 3):
        c = {"size": SPEC.samples, "world": world, "shard_size": 64, "buffer_size": 16, "seed": 1, "epoch": 2}
        per_rank = epoch_of(c, shards=storage.shards(path))
        check_contract(per_rank, SPEC.samples, world)


def test_litdata_missing_is_one_line_naming_the_extra(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "litdata", None)  # import litdata now raises ImportError
    with pytest.raises(registry.InvalidParams) as err:
        registry.validate("storage", "litdata", {})
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("storage strategy 'litdata'")
    assert "pip install --no-deps litdata==0.2.76" in msg and "'.[litdata]'" in msg


def test_the_formats_scenario_without_litdata_runs_the_other_cells_and_says_so(monkeypatch, tmp_path, capsys):
    """A shipped scenario leaves out what this machine cannot run, one line naming it, and runs the rest."""
    import sys

    from harness import cli

    monkeypatch.setitem(sys.modules, "litdata", None)
    argv = ["--scenario", "formats", "--dry-run", "--data-dir", str(tmp_path / "d"), "--out", str(tmp_path / "o")]
    assert cli.main(argv) == 0
    out, err = capsys.readouterr()
    (line,) = [ln for ln in err.splitlines() if "leaves out" in ln]
    assert line.startswith("formats: leaves out storage=litdata: ") and "pip install" in line, err
    assert "storage=litdata" not in out and "storage=hdf5" in out


def test_the_formats_scenario_without_litdata_runs_what_excludes_it(monkeypatch, tmp_path, capsys):
    import sys

    from harness import cli

    monkeypatch.setitem(sys.modules, "litdata", None)
    argv = ["--scenario", "formats", "--dry-run", "--data-dir", str(tmp_path / "d"), "--out", str(tmp_path / "o")]
    assert cli.main([*argv, "--exclude", "storage=litdata"]) == 0
    listed = capsys.readouterr().out
    assert "storage=lmdb" in listed and "litdata" not in listed
    assert cli.main([*argv, "--only", "storage=litdata"]) == 2  # asked for: the same one line
    assert "needs the litdata package" in capsys.readouterr().err


@needs_litdata
def test_litdata_parameters_are_checked():
    with pytest.raises(registry.InvalidParams, match="chunk_size must be an integer >= 1, got 0"):
        registry.validate("storage", "litdata", {"chunk_size": 0})


@pytest.mark.slow
@needs_litdata
def test_the_formats_matrix_runs_litdata_with_every_sampler_contract(tmp_path):
    from harness import cli
    from harness.results import rundir

    out = tmp_path / "out"
    argv = ["--scenario", "formats", "--only", "storage=litdata", "--samples", "64", "--steps", "3",
            "--warmup-steps", "1", "--batch-size", "4", "--quiet", "--data-dir", str(tmp_path / "d"),
            "--out", str(out)]
    assert cli.main(argv) == 0
    (run_dir,) = list(out.iterdir())
    cells = rundir.read_results(run_dir)
    assert len(cells) == 2 and all(c.measured and c.contract_ok for c in cells)


# ---- in DataLoader workers ----


@pytest.mark.slow
@pytest.mark.parametrize("name", NEW)
def test_reader_works_in_forked_dataloader_workers_after_parent_use(name, paths, expected):
    reader = registry.create("storage", name).open(paths[name])
    check_forked_workers(reader, expected)
    reader.close()
