"""Materialise a dataset into a storage format, once, and reuse it afterwards.

The dataset is a generated one (harness.data.generator.DatasetSpec) or an imported source
(harness.data.importer .SourceSpec, ``--data PATH``). ``materialise(spec, "hdf5", data_dir)``
returns ``data_dir / f"{spec.key()}-hdf5"``; a storage built with parameters that change its files
(its ``variant`` differs from the default instance's) gets ``f"{spec.key()}-{name}{variant}"``,
e.g. ``-hdf5-chunked16``. A finished materialisation holds a ``manifest.json``; it is written into
a temporary sibling directory and renamed into place atomically, so a directory with a manifest is
always complete, and an interrupted run redoes only the storage it was writing. Generation streams
sample by sample (bounded memory).

An imported source is scanned once (every image decoded small: corrupt ones are counted and
skipped; the scan is kept as ``<key>.scan.json`` + ``<key>.sides.npy`` in the data directory and
reused while the source's files are unchanged), then decoded once more into the ``mmap`` storage;
every other storage is written from that ``mmap`` materialisation, read back in chunks, so the
source is read twice whatever the matrix.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import sys
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

from harness import safewrite
from harness.data import layouts, space, verify
from harness.data.generator import GENERATOR_VERSION, DatasetSpec, generate_sample, iter_samples_parallel
from harness.data.importer import SourceSpec
from harness.errors import UsageError
from harness.progress import Progress
from strategies import registry
from strategies.sample import Sample

MANIFEST = "manifest.json"
MANIFEST_VERSION = 1
# Per-file sizes are listed in the manifest up to this many files (raw storage has 4 per sample).
MAX_LISTED_FILES = 10_000
STAGING = "mmap"  # the storage an imported source is decoded into first; the others are written from it
COPY_CHUNK = 256  # samples read back from the staging storage per batch


def load_manifest(path: Path) -> dict:
    with open(Path(path) / MANIFEST) as f:
        return json.load(f)


def _valid_manifest(path: Path, spec, storage_name: str, storage) -> bool:
    try:
        m = load_manifest(path)
    except (OSError, ValueError):
        return False
    same_origin = (m.get("source") == spec.to_dict() if isinstance(spec, SourceSpec)
                   else m.get("generator_version") == GENERATOR_VERSION)
    return (
        m.get("key") == spec.key()
        and m.get("storage") == storage_name
        and m.get("variant", storage.variant) == storage.variant  # older manifests have none
        and m.get("count") == spec.samples
        and same_origin
    )


def suffix(storage) -> str:
    """The directory-name suffix of a storage instance: its variant, or "" when that is the default
    instance's (so the directories of default storages keep their names)."""
    default = registry.create("storage", storage.name)
    return "" if storage.variant == default.variant else storage.variant


def directory(spec, storage_name: str, data_dir: Path, params: dict | None = None) -> Path:
    """Where ``spec`` in this storage (with these parameters) is materialised."""
    storage = registry.create("storage", storage_name, **(params or {}))
    return Path(data_dir) / f"{spec.key()}-{storage_name}{suffix(storage)}"


def _progress(samples: Iterable[Sample], total: int, label: str, stream: TextIO) -> Iterator[Sample]:
    """Yield the samples while reporting how many have gone by (see harness.progress)."""
    bar = Progress(label, total, stream)
    for done, s in enumerate(samples, start=1):
        yield s
        bar.update(done)
    bar.close()


def _captured(samples: Iterable[Sample], wanted: set[int], into: dict[int, Sample]) -> Iterator[Sample]:
    """Yield the samples, keeping those whose index is in ``wanted`` (the manifest's read-back
    check)."""
    for s in samples:
        if s.index in wanted:
            into[s.index] = s
        yield s


def _sample_digest(h: hashlib._Hash, s: Sample) -> None:
    h.update(str(s.index).encode())
    h.update(s.jpeg or b"")
    h.update((s.caption or "").encode("utf-8"))
    for arr in (s.image_emb, s.text_emb):
        if arr is not None:
            h.update(arr.tobytes())


def _build_manifest(spec, storage_name: str, storage, tmp: Path, given: dict[int, Sample]) -> dict:
    """The manifest of a finished materialisation. The first and last samples must read back as
    they were given: for a generated dataset as the generator makes them, for a source as captured
    while streaming (``given``)."""
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
        if isinstance(spec, DatasetSpec):
            given = {i: generate_sample(spec, i) for i in ends}
        for s, i in zip(got, ends):
            if i not in given or not s.same_as(given[i]):
                raise RuntimeError(f"{storage_name} storage read back sample {i} differently from what it was given")
            _sample_digest(h, s)
    manifest = {
        "manifest_version": MANIFEST_VERSION,
        "key": spec.key(),
        "storage": storage_name,
        "variant": storage.variant,
        "count": spec.samples,
        "total_bytes": sum(size for _, size in sizes),
        "file_count": len(sizes),
        "checksum": "sha256:" + h.hexdigest(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    if isinstance(spec, SourceSpec):
        manifest.update(source=spec.to_dict(), **{"import": spec.stats.to_dict()})
    else:
        manifest.update(spec=spec.to_dict(), generator_version=GENERATOR_VERSION)
    if len(sizes) <= MAX_LISTED_FILES:
        manifest["files"] = dict(sizes)
    manifest.update(described)
    return manifest


def materialise(spec, storage_name: str, data_dir: Path, progress: bool = True, regenerate: bool = False,
                check: str = "quick", params: dict | None = None) -> Path:
    """The directory holding ``spec`` (a DatasetSpec or a SourceSpec) in ``storage_name`` format
    built with ``params``, generating it if needed, checked against its manifest (`check`: "quick"
    sizes and sampled checksums, "full" every byte, "" none). A lock file makes concurrent callers
    (torchrun's first process on each node, sharing data_dir) generate it once."""
    data_dir = Path(data_dir)
    _writable(data_dir)
    storage = registry.create("storage", storage_name, **(params or {}))
    if isinstance(spec, SourceSpec):
        scanned(spec, data_dir, progress)
    final = data_dir / f"{spec.key()}-{storage_name}{suffix(storage)}"
    with _locked(data_dir / f".{final.name}.lock"):
        _remove_stale_tmp(final)
        if regenerate and final.exists():
            shutil.rmtree(final)
        if not _valid_manifest(final, spec, storage_name, storage):
            space.check_room(data_dir, [(f"{storage_name}{suffix(storage)}", _estimate(spec, storage, data_dir))])
            _generate(spec, storage_name, storage, data_dir, final, progress)
    if check:
        verify_dir(final, storage_name, full=check == "full")
    return final


_SIZES: dict[str, space.FieldSizes] = {}  # spec key -> its field sizes (a few samples read once)


def _estimate(spec, storage, data_dir: Path) -> int:
    """About how many bytes ``spec`` takes in ``storage`` (harness.data.space)."""
    if spec.key() not in _SIZES:
        _SIZES[spec.key()] = space.field_sizes(spec)
    return space.estimate(storage.name, _SIZES[spec.key()], spec.samples, space.block_size(data_dir))


def pending(spec, storages: list[tuple[str, dict]], data_dir: Path, regenerate: bool = False) -> list[tuple[str, int]]:
    """The storages (name, params) of ``storages`` not yet materialised in data_dir (all of them
    with ``regenerate``), with the bytes each will take (an imported source's staging storage
    included), for harness.data.space.check_room before anything is written."""
    out: dict[str, int] = {}
    wanted = list(storages)
    if isinstance(spec, SourceSpec):
        wanted.append((STAGING, {}))
    for name, params in wanted:
        storage = registry.create("storage", name, **(params or {}))
        label = f"{name}{suffix(storage)}"
        final = Path(data_dir) / f"{spec.key()}-{label}"
        if label not in out and (regenerate or not _valid_manifest(final, spec, name, storage)):
            out[label] = _estimate(spec, storage, data_dir)
    return sorted(out.items())


def _remove_stale_tmp(final: Path) -> None:
    """Temporary folders of this materialisation left by a process that no longer runs (killed
    while writing); the caller holds the lock."""
    for tmp in final.parent.glob(f"{final.name}.tmp-*"):
        pid = tmp.name.rsplit("-", 1)[-1]
        if pid.isdigit() and int(pid) != os.getpid() and not Path(f"/proc/{pid}").exists():
            shutil.rmtree(tmp, ignore_errors=True)


def scanned(spec: SourceSpec, data_dir: Path, progress: bool = True) -> SourceSpec:
    """The source's scan, read from the data directory when an unchanged source was scanned before,
    else done now (with progress) and saved there."""
    with _locked(Path(data_dir) / f".{spec.key()}.scan.lock"):
        if spec.load_scan(data_dir):
            stats = spec.stats
            if spec.strict and stats.corrupt:  # the saved scan skipped them; strict fails on the first
                first = stats.corrupt_keys[0] if stats.corrupt_keys else "an image"
                raise UsageError(f"{spec.root}/{first}: not a readable image ({stats.corrupt} in the source); "
                                 f"remove it, or run without --strict-data to skip corrupt images (they are "
                                 f"counted)")
            return spec
        bar = Progress(f"scan {spec.root}", _records_estimate(spec), sys.stderr) if progress else None
        spec.scan(progress=(lambda n: bar.update(min(n, bar.total) if bar.total else n)) if bar else None)
        if bar is not None:
            bar.close()
        spec.save_scan(data_dir)
    return spec


def _records_estimate(spec: SourceSpec) -> int:
    """About how many images the scan reads (for its progress bar): the limit, else the image files
    of a files/folder source, the rows of a parquet source, img2dataset's counted successes for tar
    shards."""
    if spec.limit is not None:
        return spec.limit
    root = spec.root
    if spec.layout in ("files", "folder"):
        return sum(1 for _, _, names in os.walk(root) for n in names if n.lower().endswith(layouts.IMAGE_EXTS))
    if spec.layout == "parquet":
        import pyarrow.parquet as pq

        return sum(pq.read_metadata(p).num_rows for p in sorted(root.glob("*.parquet"))
                   if layouts.image_column(pq.read_schema(p).names))
    total = 0
    for p in sorted(root.glob("*_stats.json")):  # img2dataset writes one per shard
        try:
            total += int(json.loads(p.read_text()).get("successes", 0))
        except (OSError, ValueError, TypeError, AttributeError):
            return 0
    return total


def verify_dir(path: Path, storage_name: str, full: bool = False) -> None:
    """DataError (one line, naming the file and --regenerate) unless the files match the
    manifest."""
    listing = registry.create("storage", storage_name).files(path) if full else None
    verify.check(path, load_manifest(path), full=full, listing=listing)


def _writable(data_dir: Path) -> None:
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        probe = data_dir / f".write-test-{os.getpid()}"
        safewrite.write_text(probe, "")
        probe.unlink()
    except OSError as e:
        raise UsageError(
            f"data directory {data_dir} is not writable ({e.strerror or e}); pass --data-dir with a writable path"
        ) from None


@contextmanager
def _locked(path: Path):
    with safewrite.open_append(path) as f:  # never through a link planted at the lock's name
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _samples(spec, storage, data_dir: Path, progress: bool) -> Iterable[Sample]:
    """What the storage is written from: the generator; for an imported source, the source itself
    (the staging storage) or the staging storage's materialisation read back in chunks (every other
    storage)."""
    if not isinstance(spec, SourceSpec):
        return iter_samples_parallel(spec)
    if storage.name == STAGING and storage.variant == registry.create("storage", STAGING).variant:
        return spec.iter_samples()
    staged = materialise(spec, STAGING, data_dir, progress=progress, check="quick")
    return _read_back(registry.create("storage", STAGING), staged, spec.samples)


def _read_back(storage, path: Path, count: int) -> Iterator[Sample]:
    reader = storage.open(path)
    try:
        for start in range(0, count, COPY_CHUNK):
            yield from reader.read_batch(list(range(start, min(start + COPY_CHUNK, count))))
    finally:
        reader.close()


def _generate(spec, storage_name: str, storage, data_dir: Path, final: Path, progress: bool) -> None:
    tmp = data_dir / f"{final.name}.tmp-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    samples = _samples(spec, storage, data_dir, progress)  # before tmp exists: staging may write first
    tmp.mkdir()
    try:
        given: dict[int, Sample] = {}  # a source's first and last samples, for the read-back check
        if isinstance(spec, SourceSpec):
            samples = _captured(samples, {0, spec.samples - 1}, given)
        if progress:
            what = "import" if isinstance(spec, SourceSpec) else "materialise"
            samples = _progress(samples, spec.samples, f"{what} {storage_name}{suffix(storage)}", sys.stderr)
        storage.write(samples, tmp, spec.samples)
        manifest = _build_manifest(spec, storage_name, storage, tmp, given)
        with open(tmp / MANIFEST, "w") as f:
            json.dump(manifest, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        if final.exists():
            shutil.rmtree(final, ignore_errors=True)  # an unfinished leftover or a --regenerate
        os.rename(tmp, final)
    except BaseException as err:
        shutil.rmtree(tmp, ignore_errors=True)
        if not isinstance(err, UsageError) and space.is_room_error(err):
            raise space.room_error(data_dir, f"{storage_name}{suffix(storage)}", err) from None
        raise
