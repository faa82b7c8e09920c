"""Parquet row groups from a bucket: pyarrow reads the object through ``RemoteFile``, a file whose
every ``read`` is one range GET (through the disk cache tier when there is one: pyarrow reads the
same ranges for the same row group, so a range seen before is a hit). ``pre_buffer``: pyarrow
coalesces the column chunks of a row group it is asked for into as few reads as their gaps allow,
so a row group costs about one GET; the footer costs two GETs once per process."""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pyarrow.parquet as pq

from strategies.remote.rangesource import RemoteSource, ServedBy
from strategies.sample import FIELDS
from strategies.storage.parquet import ParquetReader


class RemoteFile:
    """A read-only, seekable file over one object: each ``read`` is one range request."""

    def __init__(self, source: RemoteSource, name: str, size: int):
        self.source, self.name, self.size = source, name, int(size)
        self.position = 0
        self.closed = False

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def writable(self) -> bool:
        return False

    def tell(self) -> int:
        return self.position

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self.position, 2: self.size}[whence]
        self.position = max(0, min(self.size, base + offset))
        return self.position

    def read(self, n: int = -1) -> bytes:
        end = self.size if n is None or n < 0 else min(self.size, self.position + n)
        if end <= self.position:
            return b""
        data = self.source.ranges([(self.name, self.position, end)])[0]
        self.position = end
        return data

    def close(self) -> None:
        self.closed = True


class _OpenRemoteParquet:
    def __init__(self, source: RemoteSource, name: str, size: int):
        self.remote = RemoteFile(source, name, size)
        self.file = pq.ParquetFile(self.remote, pre_buffer=True)

    def close(self) -> None:
        self.file.close()
        self.remote.close()


class S3ParquetReader(ServedBy, ParquetReader):
    def __init__(self, path: Path, source: RemoteSource, size: int, fields: Sequence[str] = FIELDS,
                 cached_groups: int = 4):
        super().__init__(path, fields, cached_groups, advice="normal")
        self.source, self.size = source, int(size)

    def _open(self) -> _OpenRemoteParquet:
        return _OpenRemoteParquet(self.source, "data.parquet", self.size)

    def read_batch(self, indices):
        out = super().read_batch(indices)
        self.source.note(len(out))
        return out
