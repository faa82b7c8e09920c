"""Check a materialised dataset against its manifest before anything runs on it.

The manifest (harness.data.materialise) lists every file with its size, a *sampled* digest (SHA-256
of the size and 16 blocks of 4 KiB spread over the file, first and last included) and its full
SHA-256; above MAX_LISTED_FILES files (raw storage at scale) it lists a deterministic spot sample
of files instead, plus the count, the total bytes and one digest over every file. `quick` checks
sizes and sampled digests (a few reads per file: cheap enough before every cell); `full`
(--verify-data) rereads every byte. A mismatch is a DataError naming the file and the remedy.
Manifests written before digests existed get the size checks only.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

from harness.errors import UsageError

BLOCK = 4096
BLOCKS = 16
SPOT_FILES = 64
CHUNK = 1 << 20


class DataError(UsageError):
    """A materialised file is missing, truncated or corrupted."""


def sampled_digest(path: Path, size: int | None = None) -> str:
    size = os.path.getsize(path) if size is None else size
    h = hashlib.sha256(str(size).encode())
    with open(path, "rb") as f:
        if size <= BLOCK * BLOCKS:
            h.update(f.read())
        else:
            step = (size - BLOCK) / (BLOCKS - 1)
            for k in range(BLOCKS):
                f.seek(int(k * step))
                h.update(f.read(BLOCK))
    return h.hexdigest()


def full_digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def describe(root: Path, files: list[Path], max_listed: int) -> dict:
    """The manifest's file entries for `files` (absolute paths under root)."""
    entries, total = {}, hashlib.sha256()
    spot = set(_spot_names([str(p.relative_to(root)) for p in files])) if len(files) > max_listed else None
    size_sum = 0
    for p in files:
        rel, size = str(p.relative_to(root)), p.stat().st_size
        size_sum += size
        digest = full_digest(p)
        total.update(f"{rel}\0{size}\0{digest}\n".encode())
        if spot is None or rel in spot:
            entries[rel] = {"size": size, "sampled": sampled_digest(p, size), "sha256": digest}
    out = {"file_count": len(files), "total_bytes": size_sum, "content_sha256": total.hexdigest()}
    out["digests" if spot is None else "spot"] = entries
    return out


def _spot_names(names: list[str]) -> list[str]:
    names = sorted(names)
    if len(names) <= SPOT_FILES:
        return names
    step = (len(names) - 1) / (SPOT_FILES - 1)
    return [names[round(k * step)] for k in range(SPOT_FILES)]


def _fail(path: Path, what: str, root: Path) -> DataError:
    return DataError(f"{path}: {what}; the materialised dataset {root.name} is damaged: rerun with "
                     f"--regenerate to write it again")


def _check_file(root: Path, rel: str, entry: dict, full: bool) -> None:
    path = root / rel
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise _fail(path, "missing", root) from None
    want = entry["size"] if isinstance(entry, dict) else entry
    if size != want:
        raise _fail(path, f"{size} bytes where the manifest has {want} (truncated or overwritten)", root)
    if not isinstance(entry, dict):
        return  # an old manifest: sizes only
    if entry.get("sampled") and sampled_digest(path, size) != entry["sampled"]:
        raise _fail(path, "content differs from the manifest's sampled checksum (corrupted)", root)
    if full and entry.get("sha256") and full_digest(path) != entry["sha256"]:
        raise _fail(path, "content differs from the manifest's SHA-256 (corrupted)", root)


def check(root: Path, manifest: dict, full: bool = False, listing: list[Path] | None = None) -> None:
    """Raise DataError unless the files under root match the manifest. `listing` (every file of the
    storage, from its files()) enables the whole-dataset checks of a full verification."""
    root = Path(root)
    entries = manifest.get("digests") or manifest.get("spot") or manifest.get("files") or {}
    for rel, entry in sorted(entries.items()):
        _check_file(root, rel, entry, full)
    if full and listing is not None and "content_sha256" in manifest and "spot" in manifest:
        got = describe(root, sorted(listing), max_listed=0)
        if got["file_count"] != manifest["file_count"]:
            raise _fail(root, f"{got['file_count']} files where the manifest has {manifest['file_count']}",
                        root)
        if got["content_sha256"] != manifest["content_sha256"]:
            raise _fail(root, "content differs from the manifest's checksum over every file", root)
