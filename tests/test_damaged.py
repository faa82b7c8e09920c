"""A damaged source (img2dataset's tar or parquet cut in half) or a damaged materialised shard (cut in half, or
overwritten in place): one line naming the file and the remedy (download it again; --regenerate), exit 2."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from harness import cli
from harness.data.generator import DatasetSpec
from harness.data.importer import SourceSpec
from harness.data.materialise import materialise
from harness.data.verify import DataError
from harness.errors import UsageError
from tests.test_own_data import one_line_exit_2

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "img2dataset"
SPEC = DatasetSpec(samples=40, seed=5, profile="tiny")
STORAGES = {"webdataset": "shard-00000.tar", "parquet": "data.parquet", "lmdb": "data.mdb", "hdf5": "data.h5",
            "litdata": "chunk-0-0.bin", "mmap": "jpeg.bin"}


def _cut(path: Path) -> None:
    os.truncate(path, path.stat().st_size // 2)


def _overwrite(path: Path, middle: bool) -> None:
    """Garbage over 64 bytes at the start, or in the middle of the file (between the quick check's blocks)."""
    size = path.stat().st_size
    at = 0 if not middle else size // 2 - (size // 2) % 4096 + 2048 if size > 70_000 else size // 2
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(bytes(range(64)) if f.read(64) != bytes(range(64)) else bytes(64))


def _source(tmp_path: Path, name: str) -> Path:
    return Path(shutil.copytree(FIXTURES / name, tmp_path / name))


@pytest.mark.parametrize("name, damaged", [("webdataset-jpg", "00000.tar"), ("parquet-jpg", "00000.parquet"),
                                           ("files-jpg", "00000.parquet")])
def test_a_source_file_cut_in_half_is_one_line_naming_it(name, damaged, tmp_path):
    root = _source(tmp_path, name)
    _cut(root / damaged)
    with pytest.raises(UsageError) as err:
        SourceSpec(root).count()
    msg = str(err.value)
    assert "\n" not in msg and str(root / damaged) in msg and "download it again" in msg


@pytest.mark.parametrize("name, damaged", [("webdataset-webp", "00000.tar"), ("parquet-webp", "00000.parquet")])
def test_a_damaged_source_on_the_command_line_is_exit_2(name, damaged, tmp_path, capsys):
    root = _source(tmp_path, name)
    _cut(root / damaged)
    one_line_exit_2(["--scenario", "formats", "--data", str(root), "--quiet", "--data-dir", str(tmp_path / "d"),
                     "--out", str(tmp_path / "o")], capsys, str(root / damaged), "download it again")


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("data")


def _materialised(data_dir: Path, tmp_path: Path, name: str) -> Path:
    """A private copy of the storage's materialisation (the module's one stays intact)."""
    src = materialise(SPEC, name, data_dir, progress=False)
    copy = tmp_path / "data"
    copy.mkdir(exist_ok=True)
    return Path(shutil.copytree(src, copy / src.name))


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n == "litdata" else n  # litdata.optimize
                                  for n in sorted(STORAGES)])                                # writes with processes
@pytest.mark.parametrize("damage", ["cut", "start", "middle"])
def test_a_damaged_materialised_file_is_one_line_naming_it_and_regenerate(name, damage, data_dir, tmp_path):
    if name == "litdata":
        pytest.importorskip("litdata", reason="the litdata extra is not installed")
    path = _materialised(data_dir, tmp_path, name)
    target = path / STORAGES[name]
    if damage == "cut":
        _cut(target)
    else:
        _overwrite(target, middle=damage == "middle")
    # a cut or an overwritten first block fails the quick check before every cell; anything else --verify-data
    check = "full" if damage == "middle" else "quick"
    with pytest.raises(DataError) as err:
        materialise(SPEC, name, path.parent, progress=False, check=check)
    msg = str(err.value)
    assert "\n" not in msg and str(target) in msg and "--regenerate" in msg
    assert isinstance(err.value, UsageError)  # exit 2
    fresh = materialise(SPEC, name, path.parent, progress=False, regenerate=True, check="full")
    assert fresh == path


@pytest.mark.slow  # runs run_bench.py as a process
def test_a_damaged_materialisation_on_the_command_line_is_exit_2(tmp_path, capsys):
    argv = ["--scenario", "formats", "--quiet", "--samples", "32", "--steps", "2", "--warmup-steps", "1",
            "--batch-size", "4", "--data-dir", str(tmp_path / "d"), "--out", str(tmp_path / "o"),
            "--only", "storage=webdataset", "--only", "sampler=default", "--workload", "features"]
    assert cli.main(argv) == 0
    capsys.readouterr()
    (shard,) = (tmp_path / "d").glob("*-webdataset/shard-00000.tar")
    _cut(shard)
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    # the run's header line comes first (the data are checked as its first cell starts); then the one line
    assert "Traceback" not in err and len(err.splitlines()) <= 2, err
    last = err.splitlines()[-1]
    assert last.startswith("run_bench.py: error: ") and str(shard) in last and "--regenerate" in last


def test_after_a_failed_cell_its_data_are_checked_whole(data_dir, tmp_path):
    """Damage in the middle of a file passes the quick check and may kill the reader inside a rank: the
    supervisor then checks every byte of the cell's storage, so the user reads the file and --regenerate (exit
    2), not a failed cell (exit 1)."""
    from types import SimpleNamespace

    from harness.run.supervisor import check_data

    path = _materialised(data_dir, tmp_path, "webdataset")
    storage = SimpleNamespace(label="webdataset", name="webdataset")
    cell = SimpleNamespace(choice=lambda axis: storage)
    check_data(cell, {"webdataset": path})  # intact: nothing to say, the failure stays the cell's
    _overwrite(path / STORAGES["webdataset"], middle=True)
    with pytest.raises(DataError, match="--regenerate"):
        check_data(cell, {"webdataset": path})
