"""Materialise a dataset spec into a storage format, once, and reuse it afterwards.

``materialise(spec, "hdf5", data_dir)`` returns ``data_dir / f"{spec.key()}-hdf5"``. A
finished materialisation holds a ``manifest.json``; it is written into a temporary
sibling directory and renamed into place atomically, so a directory with a manifest is
always complete. Generation streams sample by sample (bounded memory).
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Iterator, TextIO

from harness.dataset import GENERATOR_VERSION, DatasetSpec, generate_sample, iter_samples_parallel
from harness import verify
from harness.errors import UsageError
from harness.progress import Progress
from strategies import registry
from strategies.sample import Sample

MANIFEST = "manifest.json"
MANIFEST_VERSION = 1
# Per-file sizes are listed in the manifest up to this many files (raw storage has 4 per sample).
MAX_LISTED_FILES = 10_000


def load_manifest(path: Path) -> dict:
    with open(Path(path) / MANIFEST) as f:
        return json.load(f)


def _valid_manifest(path: Path, spec: DatasetSpec, storage_name: str) -> bool:
    try:
        m = load_manifest(path)
    except (OSError, ValueError):
        return False
    return (
        m.get("key") == spec.key()
        and m.get("storage") == storage_name
        and m.get("count") == spec.samples
        and m.get("generator_version") == GENERATOR_VERSION
    )


def _progress(samples: Iterable[Sample], total: int, label: str, stream: TextIO) -> Iterator[Sample]:
    """Yield the samples while reporting how many have gone by (see harness.progress)."""
    bar = Progress(label, total, stream)
    for done, s in enumerate(samples, start=1):
        yield s
        bar.update(done)
    bar.close()


def _sample_digest(h: "hashlib._Hash", s: Sample) -> None:
    h.update(str(s.index).encode())
    h.update(s.jpeg or b"")
    h.update((s.caption or "").encode("utf-8"))
    for arr in (s.image_emb, s.text_emb):
        if arr is not None:
            h.update(arr.tobytes())


def _build_manifest(spec: DatasetSpec, storage_name: str, storage, tmp: Path) -> dict:
    files = sorted(storage.files(tmp))
    sizes = [(str(p.relative_to(tmp)), p.stat().st_size) for p in files]
    described = verify.describe(tmp, files, MAX_LISTED_FILES)  # sizes, sampled and full digests
    h = hashlib.sha256()
    for rel, size in sizes:
        h.update(f"{rel}\0{size}\n".encode())
    # Read the first and last samples back: a cheap round-trip check of the format.
    if spec.samples:
        ends = sorted({0, spec.samples - 1})
        reader = storage.open(tmp)
        try:
            got = reader.read_batch(ends)
        finally:
            reader.close()
        for s, i in zip(got, ends):
            if not s.same_as(generate_sample(spec, i)):
                raise RuntimeError(f"{storage_name} storage read back sample {i} differently from what it was given")
            _sample_digest(h, s)
    manifest = {
        "manifest_version": MANIFEST_VERSION,
        "key": spec.key(),
        "spec": spec.to_dict(),
        "generator_version": GENERATOR_VERSION,
        "storage": storage_name,
        "count": spec.samples,
        "total_bytes": sum(size for _, size in sizes),
        "file_count": len(sizes),
        "checksum": "sha256:" + h.hexdigest(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    if len(sizes) <= MAX_LISTED_FILES:
        manifest["files"] = dict(sizes)
    manifest.update(described)
    return manifest


def materialise(spec: DatasetSpec, storage_name: str, data_dir: Path, progress: bool = True,
                regenerate: bool = False, check: str = "quick") -> Path:
    """The directory holding ``spec`` in ``storage_name`` format, generating it if needed, checked against
    its manifest (`check`: "quick" sizes and sampled checksums, "full" every byte, "" none). A lock file
    makes concurrent callers (torchrun's first process on each node, sharing data_dir) generate it once."""
    data_dir = Path(data_dir)
    final = data_dir / f"{spec.key()}-{storage_name}"
    _writable(data_dir)
    with _locked(data_dir / f".{final.name}.lock"):
        if regenerate and final.exists():
            shutil.rmtree(final)
        if not _valid_manifest(final, spec, storage_name):
            _generate(spec, storage_name, data_dir, final, progress)
    if check:
        verify_dir(final, storage_name, full=check == "full")
    return final


def verify_dir(path: Path, storage_name: str, full: bool = False) -> None:
    """DataError (one line, naming the file and --regenerate) unless the files match the manifest."""
    listing = registry.create("storage", storage_name).files(path) if full else None
    verify.check(path, load_manifest(path), full=full, listing=listing)


def _writable(data_dir: Path) -> None:
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        probe = data_dir / f".write-test-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise UsageError(
            f"data directory {data_dir} is not writable ({e.strerror or e}); pass --data-dir with a writable path"
        ) from None


@contextmanager
def _locked(path: Path):
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _generate(spec: DatasetSpec, storage_name: str, data_dir: Path, final: Path, progress: bool) -> None:
    storage = registry.create("storage", storage_name)
    tmp = data_dir / f"{final.name}.tmp-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        samples: Iterable[Sample] = iter_samples_parallel(spec)
        if progress:
            samples = _progress(samples, spec.samples, f"materialise {storage_name}", sys.stderr)
        storage.write(samples, tmp, spec.samples)
        manifest = _build_manifest(spec, storage_name, storage, tmp)
        with open(tmp / MANIFEST, "w") as f:
            json.dump(manifest, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        if final.exists():
            shutil.rmtree(final, ignore_errors=True)  # an unfinished leftover or a --regenerate
        os.rename(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
