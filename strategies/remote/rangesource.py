"""What a remote reader reads through: a RangeStore (byte ranges and whole objects, ``in_flight``
at a time) behind an optional DiskTier. A range or object found in the tier costs no request; the
misses of one call are fetched together (in parallel up to ``in_flight``) and kept. ``stats()``
merges both counters for the figures. Picklable; every part opens lazily in the process that reads.

``note(samples)``, called by a reader after each batch, counts the samples read and, when the
source was told a counters folder (``counters_dir``: the harness names it to the reader it opens,
``count_into``; the folder travels with the pickled reader into each DataLoader worker), appends a
line to ``<folder>/<pid>-<id>.jsonl`` (``write_counters``): this source's counters in this process
so far, stamped with ``time.perf_counter()`` (CLOCK_MONOTONIC, one clock for every process of the
machine), the latency bins sparse ({bin: count}). One file per reading process and reader;
harness.measure.remotecounters merges them, over a whole run (each file's last line) or over a
measured window (the difference of the lines before its two ends)."""
from __future__ import annotations

import json
import os
import time

from strategies.remote.disktier import DiskTier, own_folder
from strategies.remote.s3client import RangeStore


def write_counters(owner, folder: str, counters: dict) -> None:
    """Append ``counters`` (cumulative, this process's), stamped now, to the owner's file in
    ``folder`` (nothing without one)."""
    if not folder:
        return
    line = dict(counters, t=time.perf_counter())
    if isinstance(line.get("latency_bins"), list):
        line["latency_bins"] = {str(k): n for k, n in enumerate(line["latency_bins"]) if n}
    with open(os.path.join(folder, f"{os.getpid()}-{id(owner):x}.jsonl"), "a") as f:
        f.write(json.dumps(line) + "\n")


class RemoteSource:
    def __init__(self, url: str, in_flight: int = 1, disk_cache_mb: float = 0, cache_dir: str = "",
                 endpoint_url: str = "", label: str = ""):
        self.label = label  # the storage as the matrix names it, written with the figures
        self.counters_dir = ""  # where note() appends this source's counters ("": nowhere)
        self.store = RangeStore(url, in_flight, endpoint_url)
        self.tier = DiskTier(own_folder(cache_dir), int(disk_cache_mb * 1024 * 1024)) if disk_cache_mb else None

    def _through_tier(self, keys: list[str], fetch_missing) -> list[bytes]:
        if self.tier is None:
            return fetch_missing(list(range(len(keys))))
        got = [self.tier.get(k) for k in keys]
        missing = [i for i, g in enumerate(got) if g is None]
        if missing:
            for i, data in zip(missing, fetch_missing(missing)):
                got[i] = data
                self.tier.put(keys[i], data)
        return got

    def ranges(self, requests: list[tuple[str, int, int]]) -> list[bytes]:
        """The bytes of each (object, start, end)."""
        keys = [f"{self.store.url}/{n}:{a}-{b}" for n, a, b in requests]
        return self._through_tier(keys, lambda idx: self.store.get_ranges([requests[i] for i in idx]))

    def objects(self, names: list[str]) -> list[bytes]:
        """Whole objects (one GET each, ``in_flight`` at a time)."""
        keys = [f"{self.store.url}/{n}" for n in names]
        return self._through_tier(keys, lambda idx: self.store.get_many([names[i] for i in idx]))

    def note(self, samples: int) -> None:
        with self.store.tally.lock:
            self.store.tally.samples += samples
        write_counters(self, self.counters_dir, {"url": self.store.url, "label": self.label, **self.stats()})

    def stats(self) -> dict:
        out = self.store.stats()
        if self.tier is not None:
            out.update(self.tier.stats())
        return out

    def close(self) -> None:
        self.store.close()


class SourceCounters:
    """A reader over a RemoteSource (``self.source``): its counters, and where they are
    appended."""

    source: RemoteSource

    def count_into(self, folder: str) -> None:
        """Append this reader's counters after each batch to a file in ``folder``
        (harness.measure.remotecounters)."""
        self.source.counters_dir = str(folder)

    def remote_stats(self) -> dict:
        return self.source.stats()


class ServedBy(SourceCounters):
    """What a format's reader over a RemoteSource shares: its counters, and its source closed after
    the reader it extends (the formats' readers put it first among their bases)."""

    def close(self) -> None:
        super().close()
        self.source.close()
