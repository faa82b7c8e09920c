"""Access hints (strategies.storage.advice): a reader's maps carry the hint its advice asks for (the VmFlags of
/proc/self/smaps: "rr" for MADV_RANDOM, "sr" for MADV_SEQUENTIAL), a shard-streaming sampler's storage tells
its readers, the hint travels in a pickled reader, every advice reads the same samples, and the byte ranges
asked for before a batch are whole pages, merged, where the data lie in the file. Speed is measured in
docs/cold-scale.md, not here."""
from __future__ import annotations

import mmap
import pickle
from pathlib import Path

import numpy as np
import pytest

from harness.config.matrix import Cell
from harness.config.scenario import StrategyChoice
from harness.data import pagecache
from harness.data.generator import DatasetSpec
from harness.data.materialise import materialise
from strategies import registry
from strategies.storage import advice

SPEC = DatasetSpec(samples=40, seed=3, profile="tiny")
STORAGES = ("raw", "mmap", "hdf5", "webdataset", "parquet", "lmdb")
MAPPED = {"mmap": "image_emb.npy", "hdf5": "data.h5"}  # the data file each maps (hdf5: the contiguous layout)
needs_smaps = pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="no /proc/self/smaps")


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    root = tmp_path_factory.mktemp("advice")
    return {name: materialise(SPEC, name, root, progress=False) for name in STORAGES}


def flags(path: Path) -> list[set[str]]:
    return [set(f.split()) for f in advice.map_flags(str(path))]


@needs_smaps
@pytest.mark.parametrize("name", sorted(MAPPED))
@pytest.mark.parametrize("given, access, hint, flag", [
    ("auto", None, "random", "rr"), ("auto", "sequential", "sequential", "sr"),
    ("random", "sequential", "random", "rr"), ("sequential", None, "sequential", "sr")])
def test_a_readers_map_carries_its_hint(paths, name, given, access, hint, flag):
    reader = registry.create("storage", name, advice=given).open(paths[name])
    if access:
        reader.advise(access)
    assert reader.hint == hint
    reader.read_batch([0, 7, 3])
    mapped = flags(paths[name] / MAPPED[name])
    assert mapped and all(flag in f for f in mapped)
    reader.stored_bytes()[:5].sum()
    assert all(flag in f for f in flags(paths[name] / "stored_bytes.npy"))
    reader.close()


@needs_smaps
@pytest.mark.parametrize("name", sorted(MAPPED))
def test_normal_advice_leaves_the_kernels_default(paths, name):
    reader = registry.create("storage", name, advice="normal").open(paths[name])
    reader.read_batch([1, 2])
    mapped = flags(paths[name] / MAPPED[name])
    assert mapped and not any({"rr", "sr"} & f for f in mapped)
    reader.close()


@needs_smaps
@pytest.mark.parametrize("given, flagged", [("auto", True), ("random", True), ("normal", False)])
def test_lmdb_maps_its_environment_random_unless_told_otherwise(paths, given, flagged):
    """LMDB's readahead=False is its MADV_RANDOM on the whole map; "normal" opens with readahead=True."""
    reader = registry.create("storage", "lmdb", advice=given).open(paths["lmdb"])
    reader.read_batch([5])
    mapped = flags(paths["lmdb"] / "data.mdb")
    assert mapped and all(("rr" in f) == flagged for f in mapped)
    reader.close()


@pytest.mark.parametrize("name", STORAGES)
def test_asking_for_shards_tells_the_readers_and_the_pickle_carries_it(paths, name):
    storage = registry.create("storage", name)
    reader = storage.open(paths[name])
    other = registry.create("storage", name, advice="random").open(paths[name])
    assert reader.hint == "random"  # nothing told yet: the default and balanced samplers' access
    storage.shards(paths[name])  # the harness asks for shards only for a shard-streaming sampler
    assert reader.hint == "sequential" and other.hint == "random"
    assert pickle.loads(pickle.dumps(reader)).hint == "sequential"
    reader.close()
    other.close()


@pytest.mark.parametrize("name", STORAGES)
def test_every_advice_reads_the_same_samples(paths, name):
    idx = [9, 0, 31, 9, 17, 39, 1]
    got = {}
    for given in ("normal", "random", "sequential"):
        reader = registry.create("storage", name, advice=given).open(paths[name])
        got[given] = [(s.index, s.jpeg, s.caption, s.image_emb.tobytes()) for s in reader.read_batch(idx)]
        reader.close()
    assert got["normal"] == got["random"] == got["sequential"]
    assert [g[0] for g in got["normal"]] == idx


def test_an_unknown_advice_is_one_line_naming_the_parameter():
    with pytest.raises(ValueError, match=r"advice must be one of auto, random, sequential, normal; got 'fast'"):
        registry.create("storage", "mmap", advice="fast")
    with pytest.raises(ValueError, match="access must be one of random, sequential"):
        advice.Advised().advise("backwards")


def test_ranges_are_whole_pages_merged_across_small_gaps():
    page = advice.PAGE
    ranges = [(10 * page, 10 * page + 1), (10, 20), (page + 5, page + 9)]
    assert advice.merged(ranges, 0) == [(0, 2 * page), (10 * page, 11 * page)]
    assert advice.merged(ranges, 8 * page) == [(0, 11 * page)]
    assert advice.merged([(5 * page, 5 * page)], 0) == [(5 * page, 5 * page)] and advice.merged([], 0) == []


def test_a_mapped_arrays_rows_are_located_in_its_file(tmp_path):
    from strategies.storage.base import Maps, load_mapped

    path = tmp_path / "a.npy"
    np.save(path, np.arange(1024 * 8, dtype=np.float32).reshape(-1, 1024))  # 4 KiB rows after a header
    maps = Maps()
    array = load_mapped(path, "random", maps, "a")
    ranges, offset, row_bytes = maps.ranges["a"]
    assert offset == path.stat().st_size - array.nbytes and row_bytes == 4096
    ranges.rows(offset, row_bytes, np.array([0, 5, 6]), "random")  # asks the kernel for rows inside the file
    ranges.rows(offset, row_bytes, np.array([7]), "random")  # the last row ends at the file's end
    with pytest.raises(ValueError, match="outside the file"):
        ranges.rows(offset, row_bytes, np.array([8]), "random")  # one row past the end
    with pytest.raises(ValueError, match="outside the file"):
        ranges.rows(offset + 2**40, row_bytes, np.array([0]), "random")  # 1 TB past the end
    with pytest.raises(ValueError, match="outside the file"):
        ranges.rows(-row_bytes, row_bytes, np.array([0]), "random")  # a negative offset
    with pytest.raises(ValueError, match="outside the file"):
        ranges.slices(np.array([0, 10, 2**41]), np.array([1]), offset, "random")
    assert isinstance(advice.mapping_of(array), mmap.mmap)
    maps.close()
    assert ranges.fd is None
    normal = Maps()
    load_mapped(path, "normal", normal, "a")
    assert normal.ranges == {}  # the untuned reader asks for nothing


def cell(storage: StrategyChoice, sampler: str) -> Cell:
    return Cell((storage, StrategyChoice("cache", "none"), StrategyChoice("batching", "fixed"),
                 StrategyChoice("sampler", sampler)))


def test_the_cell_line_names_the_hint_its_readers_gave():
    mmap_ = StrategyChoice("storage", "mmap")
    assert cell(mmap_, "default").advice == "random" and cell(mmap_, "balanced").advice == "random"
    assert cell(mmap_, "shards").advice == "sequential"
    normal = StrategyChoice("storage", "hdf5", (("advice", "normal"),))
    assert cell(normal, "shards").advice == "normal"
    with pytest.raises(registry.UnknownStrategy):  # an error now, no longer read as "no hint"
        assert cell(StrategyChoice("storage", "no-such-storage"), "default").advice


def test_every_mapped_field_finds_its_map_and_its_place_in_the_file(paths):
    """np.load's memmap (mmap) and np.frombuffer over the file's map (hdf5 contiguous: through a memoryview)."""
    for name in MAPPED:
        reader = registry.create("storage", name).open(paths[name])
        reader.read_batch([0])
        maps = reader._maps.get() if name == "mmap" else reader._h.get()
        assert all(isinstance(advice.mapping_of(maps.arrays[f]), mmap.mmap) for f in ("image_emb", "text_emb"))
        assert set(maps.ranges) == {"jpeg", "caption", "image_emb", "text_emb"}
        assert maps.ranges["image_emb"][2] == 4 * maps.arrays["image_emb"].shape[1]
        reader.close()


@pytest.mark.slow  # litdata.optimize writes with worker processes
def test_litdata_takes_the_advice_and_is_told_by_its_shards(tmp_path):
    pytest.importorskip("litdata")
    path = materialise(SPEC, "litdata", tmp_path, progress=False)
    storage = registry.create("storage", "litdata")
    reader = storage.open(path)
    idx = [9, 0, 31, 9]
    before = [(s.index, s.caption) for s in reader.read_batch(idx)]
    assert reader.hint == "random"
    storage.shards(path)
    assert reader.hint == "sequential" and pickle.loads(pickle.dumps(reader)).hint == "sequential"
    assert [(s.index, s.caption) for s in reader.read_batch(idx)] == before  # chunk files asked for first
    reader.close()
    assert registry.create("storage", "litdata", advice="normal").open(path).hint == "normal"


needs_io = pytest.mark.skipif(advice.read_bytes() is None, reason="the kernel keeps no per-thread I/O count")


@needs_io
def test_a_reader_stops_asking_for_resident_ranges_and_asks_again_after_a_major_fault(tmp_path, monkeypatch):
    """The real page cache: a file just written is resident, so asking for its rows reads nothing from
    storage; after WARM_AFTER such asks the rows are no longer asked for (nor built). Its pages dropped
    (written back, then POSIX_FADV_DONTNEED), reading a row through the map takes a major fault, and the next
    batch asks again."""
    from strategies.storage.base import Maps, load_mapped

    path = tmp_path / "a.npy"
    np.save(path, np.arange(1024 * 64, dtype=np.float32).reshape(-1, 1024))
    maps = Maps()
    array = load_mapped(path, "random", maps, "a")
    ranges, offset, row_bytes = maps.ranges["a"]
    asked = []
    real = advice.fd_will_need
    monkeypatch.setattr(advice, "fd_will_need", lambda fd, spans: (asked.append(list(spans)), real(fd, spans)))

    def batch(rows):
        ranges.rows(offset, row_bytes, np.array(rows), "random")
        return float(array[rows].sum())

    for _ in range(advice.WARM_AFTER + 3):
        batch([1, 2, 3])
    assert len(asked) == advice.WARM_AFTER  # resident: asked WARM_AFTER times, then not
    pagecache.drop([path])  # written back, then dropped: the rows never read through the map leave the cache
    faults = advice.major_faults()
    batch([40, 50])  # not asked (the reader believes it warm): the map faults the pages in
    if advice.major_faults() == faults:
        pytest.skip("the pages stayed resident (DONTNEED did not drop them here)")
    batch([41])
    assert len(asked) == advice.WARM_AFTER + 1  # the major fault sent it back to asking
    maps.close()


def test_the_learner_asks_while_its_asks_read_from_storage(monkeypatch):
    counter = {"bytes": 0, "faults": 0}
    monkeypatch.setattr(advice, "read_bytes", lambda: counter["bytes"])
    monkeypatch.setattr(advice, "major_faults", lambda: counter["faults"])
    monkeypatch.setattr(advice, "fd_will_need", lambda fd, spans: counter.update(bytes=counter["bytes"] + cold[0]))
    need, cold = advice.WillNeed(), [4096]
    for _ in range(10):  # cold: every ask reads
        assert need.asking()
        need.ask(0, [(0, 4096)])
    cold[0] = 0
    for _ in range(advice.WARM_AFTER):
        assert need.asking()
        need.ask(0, [(0, 4096)])
    assert not need.asking() and not need.asking()
    counter["faults"] += 1
    assert need.asking()  # a major fault since: ask again
    assert pickle.loads(pickle.dumps(need)).warm == 0  # a worker learns for itself
    monkeypatch.setattr(advice, "read_bytes", lambda: None)  # no count kept: always ask
    blind = advice.WillNeed()
    for _ in range(10):
        blind.ask(0, [(0, 4096)])
        assert blind.asking()
