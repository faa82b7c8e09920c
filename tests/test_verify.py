"""Data that never lies: a materialised dataset is checked against its manifest before it is used. Each
storage format is damaged three ways (truncated, bytes flipped, a file deleted): the error is one line that
names the file and --regenerate, and --regenerate repairs it."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from harness import cli
from harness.data import verify
from harness.data.generator import DatasetSpec
from harness.data.materialise import load_manifest, materialise

SPEC = DatasetSpec(samples=32, seed=3, profile="tiny")
STORAGES = ("raw", "mmap", "hdf5")


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("pristine")
    return {s: materialise(SPEC, s, root, progress=False) for s in STORAGES}


@pytest.fixture
def data(tmp_path, pristine) -> dict[str, Path]:
    """A private copy of the pristine datasets (hard to damage the shared one by accident)."""
    import shutil

    out = {}
    for storage, path in pristine.items():
        out[storage] = tmp_path / path.name
        shutil.copytree(path, out[storage])
    return out


def _victim(path: Path, storage: str) -> Path:
    """The file to damage: the biggest one (HDF5's data.h5, mmap's image embeddings, a raw embedding)."""
    files = [p for p in path.rglob("*") if p.is_file() and p.name != "manifest.json"]
    return max(files, key=lambda p: (p.stat().st_size, str(p)))


def _flip(path: Path, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0xFF]))


DAMAGE = {
    "truncate": lambda p: os.truncate(p, p.stat().st_size // 2),
    "flip": lambda p: _flip(p, 0),  # the first block is always in the sampled checksum
    "delete": lambda p: p.unlink(),
}
WORDS = {"truncate": "truncated", "flip": "corrupted", "delete": "missing"}


@pytest.mark.parametrize("storage", STORAGES)
@pytest.mark.parametrize("how", sorted(DAMAGE))
def test_damaged_file_is_one_line_naming_it_and_the_remedy(data, storage, how):
    victim = _victim(data[storage], storage)
    DAMAGE[how](victim)
    with pytest.raises(verify.DataError) as err:
        materialise(SPEC, storage, data[storage].parent, progress=False)
    message = str(err.value)
    assert "\n" not in message
    assert str(victim) in message and WORDS[how] in message and "--regenerate" in message
    fixed = materialise(SPEC, storage, data[storage].parent, progress=False, regenerate=True)
    materialise(SPEC, storage, data[storage].parent, progress=False, check="full")  # whole again
    assert fixed == data[storage]


def _unsampled_offset(size: int) -> int:
    step = (size - verify.BLOCK) / (verify.BLOCKS - 1)
    blocks = [(int(k * step), int(k * step) + verify.BLOCK) for k in range(verify.BLOCKS)]
    for offset in range(verify.BLOCK, size):
        if not any(a <= offset < b for a, b in blocks):
            return offset
    raise AssertionError("every byte is sampled")


def test_a_flip_outside_the_sample_needs_verify_data(data):
    victim = data["mmap"] / "image_emb.npy"
    assert victim.stat().st_size > verify.BLOCK * verify.BLOCKS
    _flip(victim, _unsampled_offset(victim.stat().st_size))
    materialise(SPEC, "mmap", data["mmap"].parent, progress=False)  # the cheap check cannot see it
    with pytest.raises(verify.DataError, match="SHA-256"):
        materialise(SPEC, "mmap", data["mmap"].parent, progress=False, check="full")


def test_manifest_lists_digests_and_an_old_manifest_is_checked_on_sizes(data):
    manifest = load_manifest(data["hdf5"])
    assert set(manifest["digests"]) == set(manifest["files"])
    assert manifest["file_count"] == len(manifest["files"]) and manifest["content_sha256"]
    old = {k: v for k, v in manifest.items() if k not in ("digests", "content_sha256")}
    (data["hdf5"] / "manifest.json").write_text(json.dumps(old))
    materialise(SPEC, "hdf5", data["hdf5"].parent, progress=False, check="full")
    os.truncate(data["hdf5"] / "data.h5", 100)
    with pytest.raises(verify.DataError, match="truncated"):
        materialise(SPEC, "hdf5", data["hdf5"].parent, progress=False)


def test_spot_check_above_the_listing_limit(tmp_path):
    root = tmp_path / "many"
    root.mkdir()
    files = []
    for i in range(100):
        (root / f"{i:03d}.bin").write_bytes(bytes([i]) * (i + 1))
        files.append(root / f"{i:03d}.bin")
    described = verify.describe(root, files, max_listed=10)
    assert len(described["spot"]) == verify.SPOT_FILES and described["file_count"] == 100
    manifest = {**described, "files": None}
    verify.check(root, manifest, full=True, listing=files)
    unsampled = next(p.name for p in files if p.name not in described["spot"])
    _flip(root / unsampled, 0)  # not in the spot sample: only the full check's digest over all files sees it
    verify.check(root, manifest)
    with pytest.raises(verify.DataError, match="checksum over every file"):
        verify.check(root, manifest, full=True, listing=files)


def test_the_cli_stops_before_any_rank_on_bad_data(tmp_path, data, capsys):
    scenario = tmp_path / "s.toml"
    scenario.write_text(f"""
[hardware]
accelerator = "V100-16GB"
count = 2
[dataset]
samples = {SPEC.samples}
seed = {SPEC.seed}
profile = "tiny"
[training]
batch_size = 4
steps = 2
[matrix]
storage = ["mmap"]
""")
    os.truncate(data["mmap"] / "jpeg.bin", 10)
    code = cli.main(["--scenario", str(scenario), "--data-dir", str(data["mmap"].parent), "--out",
                     str(tmp_path / "out"), "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err[-1].startswith("run_bench.py: error: ") and "jpeg.bin" in err[-1] and "--regenerate" in err[-1]
    (run,) = (tmp_path / "out").iterdir()
    assert not (run / "cells.jsonl").exists()  # nothing ran
