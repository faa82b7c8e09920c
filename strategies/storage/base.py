"""Helpers shared by the storages (the protocol itself is in :mod:`strategies.protocols`).

A storage writes a stream of samples into ``path`` (a directory it owns) and
opens a reader over it. Readers are created in the rank process but open their
files lazily, on first use in the process that reads (each DataLoader worker),
and reopen after a fork: file handles never cross ``fork``.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import numpy as np

from strategies.protocols import Reader, Storage  # noqa: F401  (re-exported)
from strategies.sample import FIELDS, Sample


class LazyHandle:
    """Opens a resource on first use in each process; reopens after fork."""

    def __init__(self, opener):
        self._opener = opener
        self._pid: int | None = None
        self._value = None

    def get(self):
        pid = os.getpid()
        if self._pid != pid:
            self._value = self._opener()
            self._pid = pid
        return self._value

    def close(self) -> None:
        value, self._value, self._pid = self._value, None, None
        if value is not None and hasattr(value, "close"):
            value.close()

    def __getstate__(self):
        return {"_opener": self._opener, "_pid": None, "_value": None}


def checked_fields(fields: Sequence[str]) -> tuple[str, ...]:
    """The fields as a tuple, or ValueError naming the unknown ones."""
    bad = [f for f in fields if f not in FIELDS]
    if bad:
        raise ValueError(f"unknown sample field(s) {bad}; fields are {', '.join(FIELDS)}")
    return tuple(fields)


def checked_indices(indices: Sequence[int], count: int) -> np.ndarray:
    """The indices as int64, or IndexError when one is outside [0, count)."""
    idx = np.asarray(indices, dtype=np.int64).reshape(-1)
    if idx.size and (idx.min() < 0 or idx.max() >= count):
        raise IndexError(f"indices out of range for {count} samples")
    return idx


def in_order(samples: Iterable[Sample], count: int) -> Iterator[tuple[int, Sample]]:
    """(index, sample) for a writer's stream, checking it holds exactly samples 0..count-1 in order."""
    n = 0
    for n, s in enumerate(samples, start=1):
        i = n - 1
        if i >= count:
            raise ValueError(f"more than the announced {count} samples")
        if s.index != i:
            raise ValueError(f"samples out of order: got index {s.index}, expected {i}")
        yield i, s
    if n != count:
        raise ValueError(f"got {n} samples, expected {count}")


def write_meta(path: Path, fmt: str, count: int) -> None:
    """meta.json: the storage format and sample count (so len() never opens the data files)."""
    with open(Path(path) / "meta.json", "w") as f:
        json.dump({"format": fmt, "version": 1, "count": count}, f)


def read_count(path: Path) -> int:
    with open(Path(path) / "meta.json") as f:
        return int(json.load(f)["count"])
