"""Raw objects from a bucket: one object per sample and field (the raw storage's files, uploaded as
they are), each read with one whole-object GET, ``in_flight`` at a time; the fields not asked for
are never fetched. It shows why not: a request per field per sample, where a shard costs one per
many samples."""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from strategies.remote.rangesource import RemoteSource, SourceCounters
from strategies.sample import FIELDS, Sample
from strategies.storage.base import checked_fields, checked_indices, read_count
from strategies.storage.raw import _SUFFIX, _rel_stem


class S3RawReader(SourceCounters):
    def __init__(self, path: Path, source: RemoteSource, fields: Sequence[str] = FIELDS):
        self.path = Path(path)
        self.fields = checked_fields(fields)
        self.source = source
        self._count = read_count(self.path)
        self._stored: np.ndarray | None = None

    def __len__(self) -> int:
        return self._count

    def stored_bytes(self) -> np.ndarray:
        if self._stored is None:
            self._stored = np.load(self.path / "stored_bytes.npy", mmap_mode="r")
        return self._stored

    def __getstate__(self):
        return dict(self.__dict__, _stored=None)

    def read_batch(self, indices: Sequence[int]) -> list[Sample]:
        idx = checked_indices(indices, self._count).tolist()
        names = [f"{_rel_stem(i)}{_SUFFIX[f]}" for i in idx for f in self.fields]
        got = iter(self.source.objects(names))
        out = []
        for i in idx:
            s = Sample(index=i)
            for field in self.fields:
                data = next(got)
                if field == "jpeg":
                    s.jpeg = data
                elif field == "caption":
                    s.caption = data.decode("utf-8")
                else:
                    setattr(s, field, np.frombuffer(data, dtype=np.float32).copy())
            out.append(s)
        self.source.note(len(out))
        return out

    def advise(self, access: str) -> None:
        """No kernel hint reaches a bucket (the protocol's Advised readers take one)."""

    def close(self) -> None:
        self.source.close()
        self._stored = None
