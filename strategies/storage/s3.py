"""S3 storage: a shard storage (webdataset tars, parquet row groups, raw objects one per sample and
field, litdata chunks) written to an S3-compatible bucket and read from it by byte ranges
(strategies.remote), or, for litdata chunks, by litdata itself (its StreamingDataset downloads
whole chunks: strategies.remote.s3litdata).

``storage = { name = "s3", format = "webdataset", url = "s3://dlbench/data", in_flight = 4,
disk_cache_mb = 256 }``. The endpoint, region and credentials are found the standard way (AWS
environment variables, ~/.aws/config, a profile's endpoint_url; ``endpoint_url`` overrides):
strategies.remote.s3client.

Writing: the format's own storage writes the samples into ``path`` (the local materialisation, with
its manifest), then every data file (tar shards, data.parquet, the raw objects) is uploaded under
``url/<format><variant>-<digest>/`` (digest: of the materialisation's meta.json and
stored_bytes.npy, so the same data always lands on the same prefix and other data never on it), and
``remote.json`` records the prefix and each object's size. The small sidecars (meta.json, the tar
member index, row_groups.json, stored_bytes.npy) stay local, as webdataset's indexed readers keep
their index; readers never read the local data files. ``open`` lists the prefix once (one LIST
call, counted) and uploads what the bucket lacks or holds at another size: an object store that
forgot its data (the project's own is in memory) is filled again.

Reading: ``in_flight`` range requests at once per process (a DataLoader worker); ``disk_cache_mb``
> 0 puts a size-bounded LRU disk cache tier (strategies.remote.disktier) under the reader, in its
own marked folder ``cache_dir/dlbench-disk-tier``: whole shards for webdataset, the row-group
ranges for parquet, whole objects for raw; for litdata, litdata's own chunk cache in that folder
(``max_cache_size``). Nothing else in ``cache_dir`` is touched. Every ``open`` empties the tier's
folder first, so that each visit of a cell starts with a cold tier: the ranks open their storage
before the barrier that precedes their DataLoader workers' first read (harness.train.trainloop), so
no rank's clearing meets another's reads. ``reader.remote_stats()`` gives the process's figures:
requests, bytes, LIST calls, latencies, retries, the seconds it waited, the tier's hits;
``reader.count_into(folder)`` (the harness calls it on the reader of each visit) makes every
process that reads it append those counters to a file in ``folder`` after each batch
(strategies.remote.rangesource; harness.measure.remotecounters merges them).
"""
from __future__ import annotations

import hashlib
import json
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

from strategies.params import choice, integer, number
from strategies.registry import register
from strategies.remote import disktier
from strategies.remote.rangesource import RemoteSource
from strategies.remote.s3client import RemoteError, parse_url
from strategies.remote.s3litdata import S3LitdataReader
from strategies.remote.s3parquet import S3ParquetReader
from strategies.remote.s3raw import S3RawReader
from strategies.remote.s3webdataset import S3WebDatasetReader
from strategies.sample import FIELDS, Sample
from strategies.storage.base import TrackedStorage
from strategies.storage.litdata import LitdataStorage
from strategies.storage.parquet import ParquetStorage
from strategies.storage.raw import RawStorage
from strategies.storage.webdataset import WebDatasetStorage, _read_shards_json

FORMATS = ("webdataset", "parquet", "raw", "litdata")
REMOTE = "remote.json"
SIDECARS = {"webdataset": {"meta.json", "shards.json", "index.npy", "stored_bytes.npy"},
            "parquet": {"meta.json", "row_groups.json", "stored_bytes.npy"},
            "raw": {"meta.json", "stored_bytes.npy"},
            "litdata": {"meta.json", "stored_bytes.npy"}}  # index.json goes up: litdata reads it from the bucket


def _inner(fmt: str, shard_size: int):
    if fmt == "webdataset":
        return WebDatasetStorage(shard_size=shard_size)
    if fmt == "parquet":
        return ParquetStorage(row_group_size=shard_size)
    if fmt == "litdata":
        return LitdataStorage(chunk_size=shard_size)  # one line naming the extra where litdata is missing
    return RawStorage()


def _boto3_client(endpoint_url: str = ""):
    """A boto3 S3 client, endpoint, region and credentials resolved the standard way (or
    ``endpoint_url``); the bucket's errors as one RemoteError line."""
    import boto3

    return boto3.client("s3", endpoint_url=endpoint_url or None)


def read_remote(path: Path) -> dict:
    with open(Path(path) / REMOTE) as f:
        return json.load(f)


@register("storage", "s3")
class S3Storage(TrackedStorage):
    """``format``: webdataset, parquet (the default: pyarrow is always installed, and the default
    instance is built for every s3 materialisation's variant), raw or litdata; ``url``:
    s3://BUCKET/PREFIX; ``shard_size``: samples per tar shard, parquet row group or litdata chunk;
    ``in_flight``: range requests at once per worker; ``disk_cache_mb``: the disk cache tier's size
    (0: none) in ``cache_dir`` (default: a folder of the system's temp directory named by the
    storage's variant and size); ``endpoint_url``: overrides the standard resolution."""

    name = "s3"

    def __init__(self, format: str = "parquet", url: str = "s3://dlbench/data", shard_size: int = 64,
                 in_flight: int = 4, disk_cache_mb: float = 0, cache_dir: str = "", endpoint_url: str = ""):
        self.format = choice("format", format, FORMATS)
        try:
            parse_url(url)
        except ValueError as err:
            raise ValueError(str(err)) from None
        self.url = url.rstrip("/")
        self.shard_size = integer("shard_size", shard_size, 1)
        self.in_flight = integer("in_flight", in_flight, 1)
        self.disk_cache_mb = number("disk_cache_mb", disk_cache_mb, 0)
        self.endpoint_url = str(endpoint_url)
        self.inner = _inner(self.format, self.shard_size)
        self.cache_dir = str(cache_dir) or str(Path(tempfile.gettempdir()) /
                                                f"dlbench-tier{self.variant}-{self.disk_cache_mb:g}mb")

    @property
    def variant(self) -> str:
        """The format, its own variant and the bucket's url (the local folder records where the
        data went)."""
        where = hashlib.sha1(self.url.encode()).hexdigest()[:6]
        return f"-{self.format}{self.inner.variant}-{where}"

    def write(self, samples: Iterable[Sample], path: Path, count: int) -> None:
        path = Path(path)
        self.inner.write(samples, path, count)
        digest = hashlib.sha256()
        for name in ("meta.json", "stored_bytes.npy"):
            digest.update((path / name).read_bytes())
        prefix = f"{self.format}{self.inner.variant}-{digest.hexdigest()[:16]}"
        objects = {n: (path / n).stat().st_size for n in self._data_names(path)}
        with open(path / REMOTE, "w") as f:
            json.dump({"url": f"{self.url}/{prefix}", "format": self.format, "objects": objects}, f)
        self.upload(path)

    def _data_names(self, path: Path) -> list[str]:
        return [n for n in self.inner.file_names(path) if n not in SIDECARS[self.format] | {REMOTE, "manifest.json"}]

    def upload(self, path: Path, only_missing: bool = False) -> int:
        """Put the data files the bucket lacks or holds at another size (one LIST), or every one
        unless ``only_missing``; the number put. Through boto3, not obstore: this runs in the rank
        before its DataLoader workers fork, and obstore's runtime, once started, hangs in a forked
        child."""
        remote = read_remote(path)
        try:
            return self._put_missing(remote, Path(path), only_missing)
        except Exception as err:  # noqa: BLE001 - botocore's ClientError, EndpointConnectionError, ...
            if isinstance(err, RemoteError):
                raise
            text = " ".join(str(err).split())[:160]
            raise RemoteError(f"{remote['url']}: writing the data to the bucket failed ({text}); start the "
                              f"object store, create the bucket or fix AWS_ENDPOINT_URL / the credentials") from None

    def _put_missing(self, remote: dict, path: Path, only_missing: bool) -> int:
        bucket, prefix = parse_url(remote["url"])
        client = _boto3_client(self.endpoint_url)
        have: dict[str, int] = {}
        if only_missing:
            for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/"):
                have.update((o["Key"][len(prefix) + 1:], o["Size"]) for o in page.get("Contents", []))
        put = 0
        for name, size in remote["objects"].items():
            if have.get(name) != size:
                client.put_object(Bucket=bucket, Key=f"{prefix}/{name}", Body=(Path(path) / name).read_bytes())
                put += 1
        return put

    def open(self, path: Path, fields: Sequence[str] = FIELDS):
        path = Path(path)
        remote = read_remote(path)
        put = self.upload(path, only_missing=True)
        self.clear_disk_cache()  # a cold tier for each visit (the module's docstring)
        if self.format == "litdata":
            reader = S3LitdataReader(path, remote["url"], str(disktier.own_folder(self.cache_dir)), fields,
                                     self.endpoint_url, self.disk_cache_mb, self.label())
            reader.remote_setup = {"lists": 1, "puts": put}
            return self.track(reader, path)
        source = RemoteSource(remote["url"], self.in_flight, self.disk_cache_mb, self.cache_dir, self.endpoint_url,
                              self.label())
        if self.format == "webdataset":
            reader = S3WebDatasetReader(path, source, _read_shards_json(path)["shards"], fields)
        elif self.format == "parquet":
            reader = S3ParquetReader(path, source, remote["objects"]["data.parquet"], fields,
                                     self.inner.cached_groups)
        else:
            reader = S3RawReader(path, source, fields)
        reader.remote_setup = {"lists": 1, "puts": put}  # this open's, in the rank (the workers count their own)
        return self.track(reader, path)

    def label(self) -> str:
        """The reader settings that tell two cells of this storage apart (with the remote
        figures)."""
        return (f"s3(format={self.format},shard_size={self.shard_size},in_flight={self.in_flight},"
                f"disk_cache_mb={self.disk_cache_mb:g})")

    def clear_disk_cache(self) -> None:
        """Empty the disk cache tier (a cold tier for the next visit): its own marked folder in
        cache_dir only."""
        disktier.clear(self.cache_dir)

    def _inner_of(self, path: Path):
        """The format's storage of the materialisation at ``path`` (any s3 instance may be asked
        about any materialisation: the harness asks the default one for file lists), else this
        instance's."""
        try:
            fmt = read_remote(path)["format"]
        except (OSError, ValueError, KeyError):
            return self.inner
        return self.inner if fmt == self.format else _inner(fmt, self.shard_size)

    def shard_ranges(self, path: Path) -> list[range] | None:
        return self._inner_of(path).shard_ranges(path)

    def file_names(self, path: Path) -> list[str]:
        return [n for n in self._inner_of(path).file_names(path) if n != REMOTE] + [REMOTE]
