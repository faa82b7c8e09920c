"""Byte-range reads from an S3-compatible bucket through obstore, counted: requests, bytes, LIST
calls, each request's latency, retries and the time the caller waited.

Why obstore: against the project's own local store (moto's server mode, loopback, unshaped; one
worker, one request at a time; scripts/s3/client_bench.py, docs/measurements/remote.md) obstore
made 2.7x the 16 KiB range GETs per second of boto3 (80 against 30) for 0.8 ms of client CPU per
request against boto3's 3.6 and s3fs's 4.4, and the same MB/s on 8 MiB ranges within the noise (42,
41, 53 MB/s: the server binds there). The client's CPU per request is what a DataLoader worker
spends instead of decoding, so it decided.

Where the store is: ``s3://bucket/prefix``; endpoint, region and credentials resolved the standard
way by botocore's session (AWS_ENDPOINT_URL / AWS_ENDPOINT_URL_S3, AWS_REGION / AWS_DEFAULT_REGION,
AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, AWS_PROFILE, ~/.aws/config and ~/.aws/credentials, a
profile's ``endpoint_url``), or an explicit ``endpoint_url``, then handed to obstore (which lets
AWS_ENDPOINT_URL_S3, when set, override even an explicit endpoint_url: leave that variable unset to
give one). obstore's own retries are off: throttling (503 SlowDown) and other 5xx answers are
retried here with exponential backoff and counted.

A ``RangeStore`` is picklable and opens its obstore client lazily in each process (after a fork the
child opens its own); its counters are per process.
"""
from __future__ import annotations

import math
import os
import re
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

RETRIES = 5  # attempts after the first on a 5xx / SlowDown answer
BACKOFF_S = 0.05  # first wait; doubles each retry


# The pid of the process that started obstore's runtime. That runtime does not survive a fork: a forked child
# (a DataLoader worker) of a process that used obstore hangs on its first request. Such a child reads through
# boto3 instead (fork-safe), and its figures say so ("client"); the harness opens the storage with boto3 in
# the rank, so that the workers it forks use obstore.
_OBSTORE_PID: int | None = None


class RemoteError(OSError):
    """A remote read or write that cannot succeed: one line naming the URL and the remedy.
    ``stops_run``: no later cell can read the store either, so a harness that sees it ends the run
    with ``line()`` (exit 2) rather than failing one cell."""

    stops_run = True

    def line(self) -> str:
        """The error's own line, also where a DataLoader re-raised it from a worker with the
        worker's traceback around it (whose last line is "...RemoteError: <the line>")."""
        lines = str(self).strip().splitlines()
        return lines[-1].split("RemoteError: ", 1)[-1] if lines else ""


def _status(text: str) -> int | None:
    """The HTTP status an error's text names (obstore: "status code: 503", "status: 503"; botocore:
    "(503)"), else None: digits elsewhere in the text (a timing, a request id) are never read as
    one."""
    found = re.search(r"status(?: code)?: (\d{3})\b|\((\d{3})\)", text)
    return int(found.group(1) or found.group(2)) if found else None


def _throttled(text: str) -> bool:
    """A 503 SlowDown or another 5xx answer (worth a retry with backoff)."""
    status = _status(text)
    return (status is not None and 500 <= status < 600) or "SlowDown" in text or "RequestTimeout" in text


def parse_url(url: str) -> tuple[str, str]:
    """(bucket, prefix without slashes at its ends) of ``s3://bucket/prefix``; ValueError
    otherwise."""
    if not isinstance(url, str) or not url.startswith("s3://") or not url[5:].split("/")[0]:
        raise ValueError(f"url = {url!r} must be s3://BUCKET/PREFIX")
    bucket, _, prefix = url[5:].partition("/")
    return bucket, prefix.strip("/")


def resolved(endpoint_url: str = "") -> dict:
    """The endpoint, region and credentials botocore's session resolves (env, config file,
    profile)."""
    import botocore.session

    session = botocore.session.Session()
    region = session.get_config_variable("region") or "us-east-1"
    endpoint = endpoint_url or session.get_config_variable("endpoint_url") or \
        os.environ.get("AWS_ENDPOINT_URL_S3") or ""
    if not endpoint:
        try:
            endpoint = session.create_client("s3", region_name=region).meta.endpoint_url
        except Exception:  # noqa: BLE001 - no endpoint to resolve: obstore's default
            endpoint = ""
    creds = session.get_credentials()
    config = {"region": region}
    if endpoint:
        config["endpoint"] = endpoint
    if creds is not None:
        frozen = creds.get_frozen_credentials()
        config.update(access_key_id=frozen.access_key, secret_access_key=frozen.secret_key)
        if frozen.token:
            config["session_token"] = frozen.token
    else:
        config["skip_signature"] = True
    return config


# request latencies are counted in log-spaced bins (mergeable across processes, constant size): bin k holds
# latencies in [LAT_MIN_S * LAT_STEP**k, LAT_MIN_S * LAT_STEP**(k+1)); 5% wide bins from 10 us to ~100 s
LAT_MIN_S, LAT_STEP, LAT_BINS = 1e-5, 1.05, 330


def latency_bin(seconds: float) -> int:
    if seconds <= LAT_MIN_S:
        return 0
    return min(LAT_BINS - 1, int(math.log(seconds / LAT_MIN_S) / math.log(LAT_STEP)))


class Tally:
    """One process's request counters; ``latency_bins`` counts every request's seconds (see
    latency_bin)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.requests = self.bytes = self.lists = self.retries = self.puts = self.samples = 0
        self.wait_s = 0.0
        self.latency_bins = [0] * LAT_BINS

    def __getstate__(self):  # a pickled tally is a fresh one (counters are per process)
        return {}

    def __setstate__(self, state):
        self.__init__()

    def add(self, nbytes: int, seconds: float) -> None:
        with self.lock:
            self.requests += 1
            self.bytes += nbytes
            self.latency_bins[latency_bin(seconds)] += 1

    def as_dict(self) -> dict:
        with self.lock:
            return {"samples": self.samples, "requests": self.requests, "bytes": self.bytes, "lists": self.lists,
                    "retries": self.retries, "puts": self.puts, "wait_s": self.wait_s,
                    "latency_bins": list(self.latency_bins)}


class RangeStore:
    """``s3://bucket/prefix`` read by byte ranges, up to ``in_flight`` requests at once (a thread
    pool per process), and written whole objects at a time."""

    def __init__(self, url: str, in_flight: int = 1, endpoint_url: str = ""):
        self.url = url.rstrip("/")
        self.bucket, self.prefix = parse_url(url)
        self.in_flight = int(in_flight)
        self.endpoint_url = endpoint_url
        self._pid: int | None = None
        self._store = self._pool = None
        self.client = ""
        self.tally = Tally()

    def __getstate__(self):
        return {"url": self.url, "bucket": self.bucket, "prefix": self.prefix, "in_flight": self.in_flight,
                "endpoint_url": self.endpoint_url, "_pid": None, "_store": None, "_pool": None, "tally": Tally(),
                "client": ""}

    def key(self, name: str) -> str:
        return f"{self.prefix}/{name}" if self.prefix else name

    def where(self, name: str = "") -> str:
        return f"s3://{self.bucket}/{self.key(name)}" if name else self.url

    def store(self):
        if self._pid != os.getpid():
            self._pool = ThreadPoolExecutor(self.in_flight) if self.in_flight > 1 else None
            self._pid, self.tally = os.getpid(), Tally()
            if _OBSTORE_PID not in (None, os.getpid()):
                self.client = "boto3 (forked from a process that used obstore)"
                self._store = self._boto3()
                return self._store
            self.client = "obstore"
            self._store = self._obstore()
        return self._store

    def _boto3(self):
        import boto3

        config = resolved(self.endpoint_url)
        self.endpoint = config.get("endpoint", "the default AWS endpoint")
        return boto3.client("s3", endpoint_url=config.get("endpoint"), region_name=config["region"],
                            aws_access_key_id=config.get("access_key_id"),
                            aws_secret_access_key=config.get("secret_access_key"),
                            aws_session_token=config.get("session_token"))

    def _obstore(self):
        global _OBSTORE_PID
        from obstore.store import S3Store

        retry = {"max_retries": 0, "retry_timeout": timedelta(seconds=30),
                 "backoff": {"init_backoff": timedelta(milliseconds=50), "max_backoff": timedelta(seconds=2),
                             "base": 2}}
        config = resolved(self.endpoint_url)
        self.endpoint = config.get("endpoint", "the default AWS endpoint")
        options = {"allow_http": str(config.get("endpoint", "")).startswith("http://"),
                   "connect_timeout": timedelta(seconds=5), "timeout": timedelta(seconds=120)}
        _OBSTORE_PID = os.getpid()
        return S3Store(self.bucket, config=config, client_options=options, retry_config=retry)

    def _call(self, name: str, what, *args):
        """``what(store, *args)`` with throttling retried; obstore's errors as one RemoteError
        line."""
        for attempt in range(RETRIES + 1):
            try:
                return what(self.store(), *args)
            except FileNotFoundError as err:
                raise RemoteError(self._missing(name, str(err))) from None
            except PermissionError:
                raise RemoteError(f"{self.where(name)}: access denied; give these credentials read access to "
                                  f"the bucket (AWS_ACCESS_KEY_ID / AWS_PROFILE)") from None
            except Exception as err:  # noqa: BLE001 - obstore's GenericError and friends, botocore's errors
                text = str(err)
                if "NoSuchKey" in text or "NoSuchBucket" in text:
                    raise RemoteError(self._missing(name, text)) from None
                if "AccessDenied" in text or _status(text) == 403:
                    raise RemoteError(f"{self.where(name)}: access denied; give these credentials read access to "
                                      f"the bucket (AWS_ACCESS_KEY_ID / AWS_PROFILE)") from None
                if attempt < RETRIES and _throttled(text):
                    with self.tally.lock:
                        self.tally.retries += 1
                    time.sleep(BACKOFF_S * 2 ** attempt)
                    continue
                raise RemoteError(self._failed(name, text)) from None
        raise AssertionError("unreachable")

    def _missing(self, name: str, text: str) -> str:
        if "NoSuchBucket" in text:
            return (f"{self.where(name)}: bucket {self.bucket} does not exist at {self.endpoint}; create it or fix "
                    f"the url")
        return f"{self.where(name)}: no such object; materialise the data to the bucket again (--regenerate)"

    def _failed(self, name: str, text: str) -> str:
        first = " ".join(text.split())[:160]
        if _throttled(text):
            return f"{self.where(name)}: still throttled after {RETRIES} retries ({first}); use fewer workers"
        if _status(text) == 416 or "Range Not Satisfiable" in text or "InvalidRange" in text:
            return (f"{self.where(name)}: the range asked for lies past the object's end (the object is truncated); "
                    f"materialise the data to the bucket again (--regenerate)")
        if _status(text) is None and ("error sending request" in text or "Connection refused" in text
                                      or "connect" in text.lower()):
            return (f"{self.where(name)}: cannot reach the endpoint {self.endpoint} ({first}); start the object "
                    f"store or fix AWS_ENDPOINT_URL / endpoint_url")
        return f"{self.where(name)}: {first}"

    def _get_range(self, name: str, start: int, end: int) -> bytes:
        import obstore

        t0 = time.perf_counter()
        if self.client == "obstore":
            data = bytes(self._call(name, lambda s: obstore.get_range(s, self.key(name), start=start, end=end)))
        else:
            data = self._call(name, lambda c: c.get_object(Bucket=self.bucket, Key=self.key(name),
                                                           Range=f"bytes={start}-{end - 1}")["Body"].read())
        self.tally.add(len(data), time.perf_counter() - t0)
        if len(data) != end - start:
            raise RemoteError(f"{self.where(name)}: {len(data)} bytes at offset {start}, expected {end - start} "
                              f"(the object is truncated); materialise the data to the bucket again (--regenerate)")
        return data

    def get_ranges(self, requests: Sequence[tuple[str, int, int]]) -> list[bytes]:
        """The bytes of each (object name, start, end), in order, ``in_flight`` requests at a
        time."""
        t0 = time.perf_counter()
        self.store()
        if self._pool is None or len(requests) < 2:
            out = [self._get_range(*r) for r in requests]
        else:
            out = list(self._pool.map(lambda r: self._get_range(*r), requests))
        self.tally.wait_s += time.perf_counter() - t0
        return out

    def get(self, name: str) -> bytes:
        """A whole object (one GET)."""
        import obstore

        t0 = time.perf_counter()
        if self.client == "obstore":
            data = bytes(self._call(name, lambda s: obstore.get(s, self.key(name)).bytes()))
        else:
            data = self._call(name, lambda c: c.get_object(Bucket=self.bucket, Key=self.key(name))["Body"].read())
        self.tally.add(len(data), time.perf_counter() - t0)
        return data

    def get_many(self, names: Sequence[str]) -> list[bytes]:
        """Whole objects, in order, ``in_flight`` requests at a time."""
        t0 = time.perf_counter()
        self.store()
        if self._pool is None or len(names) < 2:
            out = [self.get(n) for n in names]
        else:
            out = list(self._pool.map(self.get, names))
        self.tally.wait_s += time.perf_counter() - t0
        return out

    def put(self, name: str, data) -> None:
        import obstore

        self._call(name, lambda s: obstore.put(s, self.key(name), data))
        self.tally.puts += 1

    def names(self) -> dict[str, int]:
        """Every object under the prefix -> its size (one LIST call per page, counted)."""
        import obstore

        out: dict[str, int] = {}
        base = len(self.key("")) if self.prefix else 0
        for page in self._call("", lambda s: list(obstore.list(s, prefix=self.prefix or None))):
            with self.tally.lock:
                self.tally.lists += 1
            out.update((item["path"][base:], int(item["size"])) for item in page)
        return out

    def stats(self) -> dict:
        return {**self.tally.as_dict(), "client": self.client}

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False)
        self._store = self._pool = self._pid = None
