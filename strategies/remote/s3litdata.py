"""LitData chunks read from a bucket by litdata itself: ``litdata.StreamingDataset`` over
``s3://bucket/prefix`` (the chunks and index.json that ``litdata.optimize`` wrote, uploaded as they
are), which downloads whole chunks into its own cache directory through its own S3 client (boto3,
resolved the standard way; ``endpoint_url`` given to it as ``storage_options``) and reads items
from them. That cache is litdata's disk tier: its size is ``max_cache_size`` (the storage's
``disk_cache_mb``, else litdata's default).

The harness does not see litdata's requests, so this reader's figures have samples and the time it
waited in litdata's reads (``wait_s``), no request, byte or latency counts: its ``client`` is
"litdata", and the figures show "-" for what it cannot count (harness.measure.remotecounters)."""
from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from strategies.remote.rangesource import write_counters
from strategies.sample import FIELDS, Sample
from strategies.storage.litdata import LitdataReader, _litdata

CLIENT = "litdata"


class S3LitdataReader(LitdataReader):
    def __init__(self, path: Path, url: str, cache_dir: str, fields: Sequence[str] = FIELDS,
                 endpoint_url: str = "", max_cache_mb: float = 0, label: str = ""):
        super().__init__(path, fields, advice="normal")
        self.url, self.cache_dir, self.endpoint_url = url, str(cache_dir), endpoint_url
        self.max_cache_mb, self.label = max_cache_mb, label
        self.samples, self.wait_s = 0, 0.0
        self.counters_dir = ""  # where read_batch appends the counters ("": nowhere)

    def count_into(self, folder: str) -> None:
        """Append this reader's counters after each batch to a file in ``folder``
        (harness.measure.remotecounters)."""
        self.counters_dir = str(folder)

    def __getstate__(self):  # counters are per process
        return dict(super().__getstate__(), samples=0, wait_s=0.0)

    def _open(self):
        options = {"endpoint_url": self.endpoint_url} if self.endpoint_url else {}
        extra = {"max_cache_size": f"{self.max_cache_mb:g}MB"} if self.max_cache_mb else {}
        return _litdata().StreamingDataset(self.url, cache_dir=self.cache_dir, storage_options=options,
                                           batch_decode=self.batch_decode, **extra)

    def _will_need(self, sorted_idx) -> None:
        """No local chunk file to hint: litdata downloads them."""

    def read_batch(self, indices: Sequence[int]) -> list[Sample]:
        t0 = time.perf_counter()
        out = super().read_batch(indices)
        self.wait_s += time.perf_counter() - t0
        self.samples += len(out)
        write_counters(self, self.counters_dir, {"url": self.url, "label": self.label, "client": CLIENT,
                                                 "samples": self.samples, "wait_s": self.wait_s})
        return out

    def remote_stats(self) -> dict:
        return {"samples": self.samples, "wait_s": self.wait_s, "client": CLIENT}
