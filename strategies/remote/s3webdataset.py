"""WebDataset tar shards read from a bucket: the member offsets from the materialisation's index
(index.npy, kept beside the manifest, as webdataset's indexed readers keep their index), the bytes
by range GETs.

Without a disk cache tier each sample's close members are one range GET (the groups of the local
reader), a batch's GETs ``in_flight`` at a time. With a tier the unit is the whole shard (one GET,
kept on the local disk, as LitData and Streaming cache whole shards): later samples of that shard,
in any worker or epoch, cost no request."""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from strategies.remote.rangesource import RemoteSource, ServedBy
from strategies.sample import FIELDS, Sample
from strategies.storage.base import checked_indices
from strategies.storage.webdataset import WebDatasetReader, set_field


class S3WebDatasetReader(ServedBy, WebDatasetReader):
    def __init__(self, path: Path, source: RemoteSource, shard_names: list[str], fields: Sequence[str] = FIELDS):
        super().__init__(path, fields, advice="normal")
        self.source = source
        self.shard_names = list(shard_names)

    def read_batch(self, indices: Sequence[int]) -> list[Sample]:
        idx = checked_indices(indices, self._count)
        out = [Sample(index=int(i)) for i in idx]
        if not idx.size or not self._columns:
            return out
        rows = np.asarray(self._index.get().arrays["index"][idx])
        plan = [(int(row[0]), self._groups(row)) for row in rows.tolist()]
        if self.source.tier is not None:
            shards = sorted({shard for shard, _ in plan})
            whole = dict(zip(shards, self.source.objects([self.shard_names[k] for k in shards])))
            pieces = [[whole[shard][g[0][0]:g[-1][0] + g[-1][1]] for g in groups] for shard, groups in plan]
        else:
            requests = [(self.shard_names[shard], g[0][0], g[-1][0] + g[-1][1]) for shard, groups in plan
                        for g in groups]
            got = iter(self.source.ranges(requests))
            pieces = [[next(got) for _ in groups] for _, groups in plan]
        for s, (_, groups), datas in zip(out, plan, pieces):
            for group, data in zip(groups, datas):
                start = group[0][0]
                for offset, length, c in group:
                    set_field(s, FIELDS[c], data[offset - start:offset - start + length])
        self.source.note(len(out))
        return out
