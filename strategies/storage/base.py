"""The storage protocol.

A storage writes a stream of samples into ``path`` (a directory it owns) and
opens a reader over it. Readers are created in the rank process but open their
files lazily, on first use in the process that reads (each DataLoader worker),
and reopen after a fork: file handles never cross ``fork``.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, Protocol, Sequence

from strategies.sample import FIELDS, Sample


class Reader(Protocol):
    def __len__(self) -> int: ...

    def read_batch(self, indices: Sequence[int]) -> list[Sample]:
        """Samples for ``indices``, in the given order (duplicates allowed)."""

    def stored_bytes(self) -> "list[int]":
        """Bytes each sample occupies on disk (for cost estimates), index-aligned."""

    def close(self) -> None: ...


class Storage(Protocol):
    name: str

    def write(self, samples: Iterable[Sample], path: Path, count: int) -> None:
        """Materialise ``count`` samples (streamed, bounded memory) under ``path``."""

    def open(self, path: Path, fields: Sequence[str] = FIELDS) -> Reader: ...

    def files(self, path: Path) -> list[Path]:
        """The data files of a materialisation (for page-cache control, sizes)."""


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
