"""The page-cache state of a dataset before a cell: cold (dropped) or warm (pre-read).

Cold uses posix_fadvise(POSIX_FADV_DONTNEED), which needs no root: the kernel drops the clean
cached pages of each file (pages still mapped by a live process stay). The drop is verified by
reading a small piece of the largest file and checking, in /proc/self/io, that the read really went
to the device.

`block_device(path)` names the block device behind a path's filesystem and its ``read_ahead_kb``
(what a page fault or a read may read ahead without an access hint; env.json records it for
--data-dir).
"""
from __future__ import annotations

import os
import time
from pathlib import Path

from harness.measure.telemetry import read_bytes

STATES = ("as-is", "warm", "cold")
PROBE_BYTES = 256 * 1024
SYNC_ONCE_FILES = 1000  # above this many files, drop() flushes the host once instead of each file


def drop(files: list[Path]) -> None:
    """Drop the files' clean cached pages. Dirty pages cannot be dropped: they are flushed first,
    with one sync() of the host for many files (a storage of millions of files: one fsync each cost
    minutes per cell) and an fsync of each file for a few."""
    many = len(files) > SYNC_ONCE_FILES and hasattr(os, "sync")
    if many:
        os.sync()  # on Linux, returns when the writeback is done
    for path in files:
        fd = os.open(path, os.O_RDONLY)
        try:
            if not many:
                os.fsync(fd)  # allowed on a read-only descriptor
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def warm(files: list[Path]) -> int:
    """Read every file once so it sits in the page cache; returns the bytes read."""
    total = 0
    for path in files:
        with open(path, "rb", buffering=0) as f:
            while chunk := f.read(1 << 20):
                total += len(chunk)
    return total


def probe_read(files: list[Path]) -> dict:
    """Read PROBE_BYTES of the largest file; report whether it came from the device, and how
    fast."""
    path = max(files, key=lambda p: p.stat().st_size)
    before = read_bytes(os.getpid())
    start = time.perf_counter()
    with open(path, "rb", buffering=0) as f:
        n = len(f.read(PROBE_BYTES))
    seconds = time.perf_counter() - start
    after = read_bytes(os.getpid())
    from_device = None if before is None or after is None else after - before
    return {"path": str(path), "bytes": n, "seconds": seconds, "device_bytes": from_device,
            "mb_s": n / seconds / 1e6 if seconds > 0 else None}


def prepare(files: list[Path], state: str) -> dict:
    """Bring the files into `state` and return what was done and verified (for the cell's
    record)."""
    if state == "as-is" or not files:
        return {"state": "as-is"}
    if state == "warm":
        nbytes = warm(files)
        return {"state": "warm", "bytes": nbytes, "check": probe_read(files)}
    drop(files)
    check = probe_read(files)
    drop([Path(check["path"])])  # the probe re-cached a little of that file; drop it again
    verified = check["device_bytes"] is not None and check["device_bytes"] > 0
    return {"state": "cold", "check": check, "verified": verified}


def block_device(path: Path, sys_root: Path = Path("/sys")) -> tuple[str | None, int | None]:
    """(device name, read_ahead_kb) of the block device holding ``path``'s filesystem (the nearest
    existing parent of ``path``), found through its device number in /sys/dev/block; a partition
    reports its disk's queue. (None, None) where unknown: no such device (tmpfs, overlay), or no
    /sys."""
    path = Path(path).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    try:
        dev = os.stat(path).st_dev
        node = (sys_root / "dev" / "block" / f"{os.major(dev)}:{os.minor(dev)}").resolve(strict=True)
    except OSError:
        return None, None
    for where in (node, node.parent):  # a partition (vda1) has no queue of its own: its disk's (vda)
        try:
            return where.name, int((where / "queue" / "read_ahead_kb").read_text().strip())
        except (OSError, ValueError):
            continue
    return node.name, None
