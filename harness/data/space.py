"""Room on the data directory's file system: the bytes a materialisation will take, estimated
before it is written, against the bytes free; and a write that fails for lack of room or
permission, as one line.

The estimate reads a few samples (16 spread over a generated dataset, or the first 16 of an
imported source) and sizes each field as the storage lays it out: raw rounds every file up to the
file system's block (half a block wasted per variable-length file on average), a webdataset tar
adds a 512-byte header per member and pads each to 512 bytes, lmdb keeps each record in whole 4 KiB
pages (these three get 5% more: a mean of 16 samples is itself an estimate); the other storages
(mmap, hdf5, parquet, a plugin's) are taken as their payload plus 10%. Every storage also gets 1
MiB for its metadata. Measured (du, ext4), estimate / bytes on disk: 512 samples of the ci dataset
1.07 raw, 1.11 webdataset, 1.08 lmdb, 1.19 mmap and hdf5, 1.21 parquet; 2000 samples of the 4xV100
dataset 1.00 raw, 1.07 mmap and hdf5; 64 tiny samples 2.3 (the 1 MiB dominates). A mmap writer on a
full disk dies with SIGBUS (the kernel's answer to a page of a memory map it cannot back) instead
of raising, so the check must come first.
"""
from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from pathlib import Path

from harness.data.generator import DatasetSpec, generate_sample, head
from harness.errors import UsageError
from strategies.sample import IMAGE_EMB_DIM, TEXT_EMB_DIM

PROBE_SAMPLES = 16
NPY_HEADER = 128  # bytes before the data of a small .npy file
SLACK = 1 << 20  # per storage: meta.json, manifest, offsets, directory entries
ROOM_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM}
ROOM_WORDS = ("No space left on device", "Disk quota exceeded", "Read-only file system", "Permission denied",
              "errno = 28")


def _existing(path: Path) -> Path:
    """``path`` or its nearest existing parent (the file system it will be created on)."""
    path = Path(path).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def free_bytes(path: Path) -> int:
    """Bytes an unprivileged writer may still use on the file system holding ``path``."""
    st = os.statvfs(_existing(path))
    return st.f_bavail * st.f_frsize


def block_size(path: Path) -> int:
    return os.statvfs(_existing(path)).f_frsize or 4096


@dataclass(frozen=True)
class FieldSizes:
    """Mean bytes per sample of each field, from a few samples."""

    jpeg: float
    caption: float
    image_emb: float = 4.0 * IMAGE_EMB_DIM
    text_emb: float = 4.0 * TEXT_EMB_DIM

    @property
    def payload(self) -> float:
        return self.jpeg + self.caption + self.image_emb + self.text_emb


def field_sizes(spec) -> FieldSizes:
    """The mean field sizes of up to PROBE_SAMPLES samples: spread over a generated dataset, the
    first ones of an imported source (it streams in order)."""
    if isinstance(spec, DatasetSpec):
        n = min(PROBE_SAMPLES, spec.samples)
        samples = [generate_sample(spec, i * spec.samples // n) for i in range(n)] if n else []
    else:
        samples = head(spec, PROBE_SAMPLES)
    if not samples:
        return FieldSizes(0.0, 0.0)
    return FieldSizes(jpeg=sum(len(s.jpeg or b"") for s in samples) / len(samples),
                      caption=sum(len((s.caption or "").encode("utf-8")) for s in samples) / len(samples))


def _round_up(size: float, unit: int) -> float:
    return -(-int(size) // unit) * unit


def _rounded(mean: float, unit: int) -> float:
    """The expected size of a variable-length file of this mean size rounded up to ``unit``: half a
    unit is wasted on average, and a file takes one unit at least."""
    return max(float(unit), mean + unit / 2)


def estimate(storage_name: str, sizes: FieldSizes, count: int, block: int) -> int:
    """About how many bytes ``count`` samples of these sizes take in this storage (see the module's
    notes)."""
    fixed, variable = (sizes.image_emb, sizes.text_emb), (sizes.jpeg, sizes.caption)
    if storage_name == "raw":
        per = sum(_round_up(f, block) for f in fixed) + sum(_rounded(f, block) for f in variable)
    elif storage_name == "webdataset":
        per = sum(512 + _round_up(f + NPY_HEADER, 512) for f in fixed) + sum(512 + _rounded(f, 512)
                                                                            for f in variable)
    elif storage_name == "lmdb":
        per = _round_up(sizes.payload + 64, 4096)
    else:
        return int(sizes.payload * 1.1 * count) + SLACK
    return int(per * 1.05 * count) + SLACK  # 5%: the few samples' mean is itself an estimate


def check_room(data_dir: Path, needs: list[tuple[str, int]], free=None) -> None:
    """A one-line UsageError naming --data-dir when the storages still to write (name, estimated
    bytes) do not fit in the free bytes of data_dir's file system. ``free``: the free-space
    function (for tests)."""
    if not needs:
        return
    data_dir = Path(data_dir)
    have = (free or free_bytes)(data_dir)
    total = sum(n for _, n in needs)
    if total > have:
        what = ", ".join(f"{name} {n:,}" for name, n in needs)
        raise UsageError(f"--data-dir {data_dir}: the datasets to write need about {total:,} bytes ({what}) and "
                         f"its file system has {have:,} bytes free; free some space, pass --data-dir on a "
                         f"larger disk, or use fewer --samples")


def is_room_error(err: BaseException) -> bool:
    """True for a write that failed for lack of room or permission (ENOSPC, EDQUOT, EROFS, EACCES),
    also when a library (h5py, pyarrow, lmdb) reports it in its own exception."""
    if isinstance(err, OSError) and err.errno in ROOM_ERRNOS:
        return True
    text = str(err)
    return any(word in text for word in ROOM_WORDS)


def room_error(data_dir: Path, storage_label: str, err: BaseException) -> UsageError:
    """The one line for a write that failed for lack of room or permission."""
    try:
        have = f"{free_bytes(Path(data_dir)):,} bytes free"
    except OSError:
        have = "free space unknown"
    reason = getattr(err, "strerror", None) or " ".join(str(err).split())[:160]
    return UsageError(f"--data-dir {data_dir}: writing the {storage_label} dataset failed ({reason}; {have}); "
                      f"the partial files are removed; free some space, or pass --data-dir with a writable "
                      f"directory on a larger disk")
