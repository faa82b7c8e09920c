"""Access hints: what a reader tells the kernel about how it will read its files.

Without a hint, a page fault on a memory map reads ahead around the fault (up to the block device's
``read_ahead_kb``, 8 MiB on some virtual disks), and a ``pread`` on a descriptor starts the file's
read-ahead window. For random rows of an 11 KB sample that reads megabytes per sample from the
device (measured: docs/cold-scale.md). A reader's ``advice`` (a storage parameter) chooses the
hint:

- ``"random"``: ``madvise(MADV_RANDOM)`` on its maps, ``posix_fadvise(POSIX_FADV_RANDOM)`` on its
  descriptors: no read-ahead, a fault reads its own page only;
- ``"sequential"``: ``MADV_SEQUENTIAL`` / ``POSIX_FADV_SEQUENTIAL`` (a larger read-ahead window);
- ``"normal"``: no hint and no prefetch at all: the kernel's defaults, the untuned behaviour;
- ``"auto"`` (the default): the access the reader was told (``advise("random" | "sequential")``,
  what the sampler does: ``access_of(sampler)``), and ``"random"`` until it is told.

How a reader is told: the harness asks a storage for its ``shards(path)`` only for a
shard-streaming sampler (strategies.protocols.Sampler.uses_shards), before the loader starts, so a
storage's ``shards`` tells the readers it opened on that path ``advise("sequential")``
(``Tracked``); a caller may also call ``reader.advise`` itself. The readers are pickled to the
loader's workers after that, with their access.

Under every hint but ``"normal"`` a reader that knows the byte ranges of the batch it is about to
read asks for exactly those first (``POSIX_FADV_WILLNEED`` on a descriptor of the file, ranges
closer than a gap merged; ``FileRanges`` for a mapped file): the kernel then reads them all at
once, with many requests in flight, instead of one page fault after another, and the faults that
follow find their pages and read nothing more. Under shard streaming those ranges are the runs of
the shards the batch reads.

On a warm page cache that ask is pure cost (1.9-2.7x on warm mmap and hdf5 reads, measured: a
syscall per range and the Python that builds them). So a reader learns (``WillNeed``): an ask after
which the thread had read no byte from storage (``/proc/thread-self/io`` read_bytes) found its
ranges resident; after ``WARM_AFTER`` such batches in a row it stops asking and building the
ranges, until a batch's reads take a major page fault (``getrusage``: a page had left the cache),
and then asks again. The hint on the maps and descriptors is unchanged, so a cold read still reads
only what it asks for.
"""
from __future__ import annotations

import mmap
import os
import re
import resource
import weakref
from collections.abc import Iterable

import numpy as np

from strategies.params import choice

ADVICE = ("auto", "random", "sequential", "normal")
ACCESSES = ("random", "sequential")
PAGE = mmap.PAGESIZE
# ranges at most this far apart are asked for as one (random rows: merge only neighbouring pages;
# sequential runs: read small gaps through rather than split the request)
MERGE_GAP = {"random": 0, "sequential": 64 << 10}

_MADV = {"random": getattr(mmap, "MADV_RANDOM", None), "sequential": getattr(mmap, "MADV_SEQUENTIAL", None),
         "normal": getattr(mmap, "MADV_NORMAL", None)}
_FADV = {"random": getattr(os, "POSIX_FADV_RANDOM", None),
         "sequential": getattr(os, "POSIX_FADV_SEQUENTIAL", None),
         "normal": getattr(os, "POSIX_FADV_NORMAL", None)}
_WILLNEED_FD = getattr(os, "POSIX_FADV_WILLNEED", None)
_MAP_HEADER = re.compile(r"^[0-9a-f]+-[0-9a-f]+ ")


def checked(value) -> str:
    """The ``advice`` parameter, or ValueError naming it."""
    return choice("advice", value, ADVICE)


def access_of(sampler) -> str:
    """How a sampler strategy reads: "sequential" for a shard-streaming one (``uses_shards``), else
    "random"."""
    return "sequential" if getattr(sampler, "uses_shards", False) else "random"


def resolved(advice: str, access: str | None) -> str:
    """The hint a reader gives: its advice, or for "auto" the access it was told ("random" when
    none)."""
    return advice if advice != "auto" else (access or "random")


def cell_hint(storage, sampler) -> str | None:
    """The hint the readers of ``storage`` give under ``sampler`` (strategies), None for a storage
    without an ``advice`` parameter."""
    configured = getattr(storage, "advice", None)
    return None if configured is None else resolved(configured, access_of(sampler))


class Advised:
    """A reader's advice and the access it was told (pickled with the reader: a worker opens its
    maps with the hint of the reader it received). ``advise`` before the first read; after it, the
    reader's open handles are closed and reopen with the new hint on the next read."""

    advice: str = "auto"
    access: str | None = None

    @property
    def hint(self) -> str:
        """"random", "sequential" or "normal": what this reader tells the kernel."""
        return resolved(self.advice, self.access)

    def advise(self, access: str) -> None:
        """How the reader will be read: "random" (the default and balanced samplers) or
        "sequential" (a shard-streaming sampler). Only an ``advice = "auto"`` reader follows it."""
        before = self.hint
        self.access = choice("access", access, ACCESSES)
        if self.hint != before:
            self.close()

    def close(self) -> None:  # the reader's own close
        pass


class Tracked:
    """A storage that remembers the readers it opened (weakly), so that ``streamed(path)`` (called
    from its ``shards``) can tell them they will be read shard by shard."""

    def track(self, reader, path):
        self.__dict__.setdefault("_opened", []).append((os.path.realpath(path), weakref.ref(reader)))
        return reader

    def streamed(self, path) -> None:
        where = os.path.realpath(path)
        for opened, ref in self.__dict__.get("_opened", []):
            reader = ref()
            if reader is not None and opened == where:
                reader.advise("sequential")

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if k != "_opened"}


def advise_map(mm, hint: str) -> None:
    """The hint on a whole ``mmap.mmap`` (an empty file's ``b""`` has none); "normal" leaves it
    untouched."""
    option = _MADV.get(hint)
    if hint != "normal" and option is not None and isinstance(mm, mmap.mmap) and len(mm):
        mm.madvise(option)


def advise_fd(fd: int, hint: str) -> None:
    """The hint on an open descriptor (its whole file); "normal" leaves it untouched."""
    option = _FADV.get(hint)
    if hint != "normal" and option is not None:
        os.posix_fadvise(fd, 0, 0, option)


def mapping_of(array: np.ndarray):
    """The ``mmap.mmap`` an array views (walking its bases), or None."""
    base = array
    while base is not None:
        if isinstance(base, mmap.mmap):
            return base
        if isinstance(base, memoryview):  # np.frombuffer(map) views the map through a memoryview
            base = base.obj
            continue
        base = getattr(base, "_mmap", None) or getattr(base, "base", None)
    return None


def merged(ranges: list[tuple[int, int]], gap: int) -> list[tuple[int, int]]:
    """Byte ranges [start, end) widened to whole pages, sorted, and merged when at most ``gap``
    apart (plain Python: a batch has tens of ranges, where numpy's per-call overhead would
    dominate)."""
    out: list[list[int]] = []
    for start, end in sorted(ranges):
        lo, hi = start - start % PAGE, -(-end // PAGE) * PAGE
        if out and lo <= out[-1][1] + gap:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return [(lo, hi) for lo, hi in out]


IO_FILE = "/proc/thread-self/io"
WARM_AFTER = 4  # asks in a row that read nothing from storage before a reader stops asking


def read_bytes() -> int | None:
    """Bytes this thread has had read from storage so far (its read-ahead and WILLNEED included:
    they are counted when submitted), None where the kernel does not keep the count."""
    try:
        with open(IO_FILE, "rb") as f:
            for line in f:
                if line.startswith(b"read_bytes:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def major_faults() -> int:
    """This thread's major page faults so far (a fault that had to read from storage)."""
    return resource.getrusage(getattr(resource, "RUSAGE_THREAD", resource.RUSAGE_SELF)).ru_majflt


class WillNeed:
    """Whether a reader's next batch should ask for its ranges: yes while its asks still read from
    storage, no after WARM_AFTER asks in a row that read nothing, yes again once the thread takes a
    major fault. Not pickled with its state: a worker learns for itself."""

    def __init__(self):
        self.warm = 0  # asks in a row after which the thread had read nothing from storage
        self.faults = 0  # the thread's major faults when last looked at

    def asking(self) -> bool:
        if self.warm < WARM_AFTER:
            return True
        faults = major_faults()
        if faults != self.faults:  # a page the batch read had left the cache: ask again
            self.warm, self.faults = 0, faults
            return True
        return False

    def ask(self, fd: int, spans: Iterable[tuple[int, int]]) -> None:
        before = read_bytes()
        fd_will_need(fd, spans)
        after = read_bytes()
        self.warm = self.warm + 1 if before is not None and after == before else 0
        self.faults = major_faults()

    def __getstate__(self):
        return {"warm": 0, "faults": 0}


def fd_will_need(fd: int, spans: Iterable[tuple[int, int]]) -> None:
    """POSIX_FADV_WILLNEED on byte ranges of a descriptor's file."""
    if _WILLNEED_FD is None:
        return
    for a, b in spans:
        if b > a:
            os.posix_fadvise(fd, a, b - a, _WILLNEED_FD)


class FileRanges:
    """A descriptor of a memory-mapped file, kept to ask for the byte ranges a batch will read
    before the map is touched (POSIX_FADV_WILLNEED fills the same page cache the map reads; cheaper
    per call than madvise, and in file offsets, so no map address is needed)."""

    def __init__(self, path):
        self.fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        self.path, self.size = str(path), os.fstat(self.fd).st_size
        self.need = WillNeed()

    def rows(self, offset: int, row_bytes: int, sorted_idx: np.ndarray, hint: str) -> None:
        """Rows ``sorted_idx`` of fixed-size rows starting at file offset ``offset`` (not under
        "normal", nor while the page cache holds them: WillNeed); a ValueError for a range outside
        the file (a reader's arithmetic gone wrong, never a silent no-op)."""
        if hint != "normal" and len(sorted_idx) and self.need.asking():
            self._ask([(offset + i * row_bytes, offset + (i + 1) * row_bytes) for i in sorted_idx.tolist()], hint)

    def slices(self, offsets: np.ndarray, sorted_idx: np.ndarray, base: int, hint: str) -> None:
        """The slices ``base + offsets[i] : base + offsets[i + 1]`` (as rows); ranges checked as
        rows."""
        if hint != "normal" and len(sorted_idx) and self.need.asking():
            starts, ends = offsets[sorted_idx].tolist(), offsets[sorted_idx + 1].tolist()
            self._ask([(base + a, base + b) for a, b in zip(starts, ends)], hint)

    def _ask(self, ranges: list[tuple[int, int]], hint: str) -> None:
        """The exact ranges checked against the file, then asked for widened to pages and
        merged."""
        for start, end in ranges:
            if start < 0 or end < start or end > self.size:
                raise ValueError(f"{self.path}: bytes [{start}, {end}) lie outside the file's {self.size} bytes")
        self.need.ask(self.fd, merged(ranges, MERGE_GAP[hint]))

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def map_flags(path: str) -> list[str]:
    """The VmFlags of this process's maps of ``path`` (/proc/self/smaps; "rr": MADV_RANDOM, "sr":
    MADV_SEQUENTIAL), one string per map; [] where smaps is not available."""
    try:
        with open("/proc/self/smaps") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    real = os.path.realpath(path)
    out, inside = [], False
    for line in lines:
        if _MAP_HEADER.match(line):
            head = line.split(maxsplit=5)
            inside = len(head) == 6 and os.path.realpath(head[5]) == real
        elif inside and line.startswith("VmFlags:"):
            out.append(line[len("VmFlags:"):].strip())
            inside = False
    return out
