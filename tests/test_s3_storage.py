"""The s3 storage against the project's own real object store (moto's server mode on loopback), read through
the real obstore client: the same samples as the generator, the requests each format costs, the disk cache
tier, a store that forgot its data, and the hard edges as one line naming the URL and the remedy."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("moto.server", reason="the local object store needs moto's server mode: pip install 'moto[server]'")
pytestmark = pytest.mark.slow  # the object store is a process of its own (the s3_server fixture)
pytest.importorskip("obstore", reason="the s3 storage reads through obstore: pip install obstore")

from harness.data.generator import DatasetSpec, generate_sample  # noqa: E402
from harness.data.materialise import materialise  # noqa: E402
from harness.lab.server import ObjectServer  # noqa: E402
from strategies import registry  # noqa: E402
from strategies.remote.s3client import RangeStore, RemoteError  # noqa: E402
from strategies.storage.s3 import read_remote  # noqa: E402

SPEC = DatasetSpec(samples=40, seed=3, profile="tiny")
INDICES = [0, 17, 16, 39, 17]


def _open(tmp_path, fmt, **params):
    params = {"format": fmt, "shard_size": 16, **params}
    path = materialise(SPEC, "s3", tmp_path, progress=False, params=params)
    return path, registry.create("storage", "s3", **params)


@pytest.mark.parametrize("fmt, per_sample", [("webdataset", 1), ("raw", 4)])
def test_same_samples_and_requests_per_sample(s3_server, tmp_path, fmt, per_sample):
    path, storage = _open(tmp_path, fmt)
    reader = storage.open(path)
    got = reader.read_batch(INDICES)
    assert [s.index for s in got] == INDICES
    assert all(s.same_as(generate_sample(SPEC, i)) for s, i in zip(got, INDICES))
    stats = reader.remote_stats()
    assert stats["requests"] == per_sample * len(INDICES)  # one range per sample; one object per field
    assert stats["samples"] == len(INDICES)
    assert sum(stats["latency_bins"]) == stats["requests"]
    reader.close()


def test_parquet_costs_footer_and_one_request_per_row_group(s3_server, tmp_path):
    path, storage = _open(tmp_path, "parquet")
    reader = storage.open(path)
    got = reader.read_batch(INDICES)
    assert all(s.same_as(generate_sample(SPEC, i)) for s, i in zip(got, INDICES))
    # rows 0..15, 16..31, 32..39: three row groups; the footer once (pyarrow reads its tail, then the footer)
    assert 3 <= reader.remote_stats()["requests"] <= 3 + 2
    reader.close()


def test_disk_tier_serves_a_shard_read_before(s3_server, tmp_path):
    path, storage = _open(tmp_path, "webdataset", disk_cache_mb=8, cache_dir=str(tmp_path / "tier"))
    reader = storage.open(path)
    reader.read_batch([16, 17])  # shard 1 (the manifest's read-back read shards 0 and 2): one whole-shard GET
    first = reader.remote_stats()
    reader.read_batch([18, 19, 31])  # shard 1 again: from the local disk
    second = reader.remote_stats()
    assert first["requests"] == 1 and first["disk_misses"] == 1
    assert second["requests"] == 1 and second["disk_hits"] == 1
    assert reader.read_batch([31])[0].same_as(generate_sample(SPEC, 31))
    reader.close()


def test_open_refills_a_store_that_forgot_its_data(s3_server, tmp_path):
    path, storage = _open(tmp_path, "webdataset")
    store = RangeStore(read_remote(path)["url"])
    store.store()
    import obstore

    obstore.delete(store.store(), store.key("shard-00001.tar"))
    reader = storage.open(path)  # one LIST, the missing shard put again
    assert reader.remote_setup == {"lists": 1, "puts": 1}
    assert reader.read_batch([20])[0].same_as(generate_sample(SPEC, 20))
    reader.close()


def test_missing_and_truncated_objects_are_one_line_naming_the_url(s3_server, tmp_path):
    path, storage = _open(tmp_path, "webdataset")
    reader = storage.open(path)
    url = read_remote(path)["url"]
    import obstore

    store = RangeStore(url)
    obstore.delete(store.store(), store.key("shard-00002.tar"))
    with pytest.raises(RemoteError, match=rf"^{url}/shard-00002.tar: no such object; .*--regenerate"):
        reader.read_batch([33])
    shard = (path / "shard-00002.tar").read_bytes()
    cut = int(np.load(path / "index.npy")[39, 1::2].min()) + 10  # 10 bytes into sample 39's first member
    obstore.put(store.store(), store.key("shard-00002.tar"), shard[:cut])
    with pytest.raises(RemoteError, match=r"shard-00002.tar: \d+ bytes at offset \d+, expected \d+ .*truncated"):
        reader.read_batch([39])
    obstore.put(store.store(), store.key("shard-00002.tar"), b"short")
    with pytest.raises(RemoteError, match=r"shard-00002.tar: the range asked for lies past the object's end"):
        reader.read_batch([39])
    reader.close()


def test_missing_bucket_and_unreachable_endpoint(s3_server):
    with pytest.raises(RemoteError, match=r"^s3://no-such-bucket/p/x: bucket no-such-bucket does not exist"):
        RangeStore("s3://no-such-bucket/p").get_ranges([("x", 0, 4)])
    port = s3_server.port + 1 if s3_server.port < 65535 else 1024
    with pytest.raises(RemoteError, match=r"cannot reach the endpoint http://127.0.0.1:\d+ .*start the object store"):
        RangeStore("s3://dlbench/p", endpoint_url=f"http://127.0.0.1:{port}").get_ranges([("x", 0, 4)])


def test_bad_parameters_are_one_line(s3_server):
    with pytest.raises(registry.InvalidParams, match="url = 'http://x' must be s3://BUCKET/PREFIX"):
        registry.validate("storage", "s3", {"url": "http://x"})
    with pytest.raises(registry.InvalidParams, match="format"):
        registry.validate("storage", "s3", {"format": "hdf5"})


def _read_in_child(reader, queue) -> None:
    got = reader.read_batch([3, 30])
    queue.put((all(s.same_as(generate_sample(SPEC, i)) for s, i in zip(got, [3, 30])), reader.remote_stats()))


@pytest.mark.parametrize("fmt", ["webdataset", "raw"])
def test_a_forked_worker_reads_after_the_rank_opened(s3_server, tmp_path, fmt):
    """What a DataLoader worker does: the rank opens the storage (a LIST, maybe puts), then forks the worker."""
    import multiprocessing as mp

    path, storage = _open(tmp_path, fmt, in_flight=4)
    reader = storage.open(path)
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_read_in_child, args=(reader, queue))
    child.start()
    ok, stats = queue.get(timeout=60)
    child.join(30)
    assert ok and stats["samples"] == 2 and stats["requests"] >= 2
    reader.close()


class _SlowDownProxy:
    """A real HTTP front of the store that answers the first ``throttle`` requests 503 SlowDown (what S3 sends
    past about 5,500 GET/s per prefix) and forwards the rest to the server: moto itself never throttles."""

    def __init__(self, upstream: str, throttle: int):
        import http.server
        import threading
        import urllib.request

        proxy = self
        self.throttle, self.seen = throttle, 0

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                proxy.seen += 1
                if proxy.seen <= proxy.throttle:
                    body = b"<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>"
                    self.send_response(503, "Slow Down")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                request = urllib.request.Request(upstream + self.path, headers=dict(self.headers))
                with urllib.request.urlopen(request) as answer:
                    data = answer.read()
                    self.send_response(answer.status)
                    for key, value in answer.headers.items():
                        if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                            self.send_header(key, value)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()


def test_throttling_is_retried_with_backoff_and_counted(s3_server, tmp_path):
    path, storage = _open(tmp_path, "webdataset")
    url = read_remote(path)["url"]
    proxy = _SlowDownProxy(s3_server.endpoint, throttle=2)
    try:
        store = RangeStore(url, endpoint_url=proxy.endpoint)
        data = store.get_ranges([("shard-00000.tar", 0, 512)])[0]
        assert data == (path / "shard-00000.tar").read_bytes()[:512]
        assert store.stats()["retries"] == 2
        proxy.seen, proxy.throttle = 0, 100  # throttled past every retry: one line, the remedy
        with pytest.raises(RemoteError, match=r"shard-00000.tar: still throttled after 5 retries .*fewer workers"):
            store.get_ranges([("shard-00000.tar", 0, 512)])
    finally:
        proxy.close()


def test_access_denied_is_one_line_naming_the_url(tmp_path, monkeypatch):
    """moto enforces IAM once INITIAL_NO_AUTH_ACTION_COUNT actions have passed: a user without a policy is
    denied the read, and the line names the URL and the credentials to fix."""
    import boto3
    import botocore

    monkeypatch.setenv("INITIAL_NO_AUTH_ACTION_COUNT", "8")  # the server's start, the set-up below, then auth
    with ObjectServer("dlbench") as s:
        for key, value in s.env().items():
            monkeypatch.setenv(key, value)
        iam = boto3.client("iam")
        iam.create_user(UserName="reader")
        key = iam.create_access_key(UserName="reader")["AccessKey"]
        s3 = boto3.client("s3")
        s3.put_object(Bucket="dlbench", Key="p/x", Body=b"0123456789")
        for _ in range(8):  # spend what is left of the unauthenticated actions
            try:
                s3.head_bucket(Bucket="dlbench")
            except botocore.exceptions.ClientError:
                break
        else:
            pytest.fail("the server never started to authenticate")
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", key["AccessKeyId"])
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", key["SecretAccessKey"])
        with pytest.raises(RemoteError, match=r"^s3://dlbench/p/x: access denied; give these credentials read "
                                              r"access") as err:
            RangeStore("s3://dlbench/p").get_ranges([("x", 0, 4)])
        assert "\n" not in str(err.value)


@pytest.mark.parametrize("text, line", [
    ("Error performing GET http://h/b/k in 1.416ms - Server returned non-2xx status code: 503 Service Unavailable: "
     "<Error><Code>SlowDown</Code></Error>", "still throttled after 5 retries"),
    ("Error performing GET http://h/b/k in 2.1ms - Server returned non-2xx status code: 416 Range Not Satisfiable",
     "lies past the object's end"),
    ("An error occurred (500) when calling the GetObject operation (reached max retries: 0): connect error",
     "still throttled"),
    ("error sending request for url (http://127.0.0.1:9/b/k): client error (Connect) 4161 ms", "cannot reach"),
])
def test_an_error_is_named_by_its_status_not_by_digits_elsewhere(text, line):
    """A timing or request id holding "416" or "503" is not a status: the line follows the status code."""
    store = RangeStore("s3://b/p")
    store.endpoint = "http://h"
    assert line in store._failed("k", text)


def test_each_open_starts_with_a_cold_tier(s3_server, tmp_path):
    """A visit opens the storage in each rank before its workers read: the tier a previous visit filled is
    emptied, so every visit of a disk-cache cell starts cold."""
    path, storage = _open(tmp_path, "webdataset", disk_cache_mb=8, cache_dir=str(tmp_path / "tier"))
    first = storage.open(path)
    first.read_batch([16])
    first.read_batch([17])
    assert (first.remote_stats()["disk_misses"], first.remote_stats()["disk_hits"]) == (1, 1)
    first.close()
    tier = tmp_path / "tier" / "dlbench-disk-tier"  # the tier's own folder in the cache_dir named
    assert any(tier.iterdir())
    second = storage.open(path)  # the next visit
    assert not any(p for p in tier.iterdir() if not p.name.startswith("."))
    second.read_batch([17])
    assert (second.remote_stats()["disk_misses"], second.remote_stats()["requests"]) == (1, 1)
    second.close()


def test_a_reader_told_its_counters_folder_counts_there_and_its_pickle_too(s3_server, tmp_path):
    """The harness names the folder to the reader it opens (count_into); a DataLoader worker gets the reader
    by pickle (forkserver), and writes its own file there: one line of cumulative counters per batch."""
    import json
    import pickle

    path, storage = _open(tmp_path, "raw")
    quiet = storage.open(path)
    quiet.read_batch([1])
    reader = storage.open(path)
    folder = tmp_path / "counters"
    folder.mkdir()
    reader.count_into(folder)
    reader.read_batch([1, 2])
    worker = pickle.loads(pickle.dumps(reader))
    worker.read_batch([3])
    worker.read_batch([4, 5])
    files = sorted(folder.glob("*.jsonl"))
    assert len(files) == 2  # the reader's and its pickle's: one file per reading process and reader
    lines = sorted(([json.loads(t) for t in f.read_text().splitlines()] for f in files), key=len)
    assert [[line["samples"] for line in f] for f in lines] == [[2], [1, 3]]
    assert all(line["label"] == storage.label() and line["requests"] == 4 * line["samples"] for f in lines
               for line in f)
    for r in (quiet, reader, worker):
        r.close()


class _Unreadable:
    def __len__(self):
        return 4

    def __getitem__(self, i):
        raise RemoteError("s3://dlbench/p/shard-00001.tar: no such object; materialise the data to the bucket "
                          "again (--regenerate)")


def test_a_worker_s_remote_error_keeps_its_one_line_through_the_dataloader():
    """torch's DataLoader re-raises a worker's error with the worker's traceback in its text; line() is the
    error's own line again, for the harness to end the run with."""
    import torch.utils.data

    loader = torch.utils.data.DataLoader(_Unreadable(), num_workers=1)
    with pytest.raises(RemoteError) as err:
        next(iter(loader))
    assert "\n" in str(err.value) and "DataLoader worker" in str(err.value)  # torch's wrapping
    assert err.value.line() == ("s3://dlbench/p/shard-00001.tar: no such object; materialise the data to the "
                                "bucket again (--regenerate)")
    assert err.value.stops_run


def test_the_tier_never_deletes_what_it_did_not_write(s3_server, tmp_path):
    """A cache_dir that holds the user's files (`data`, `.`): opening, reading past the tier's capacity and
    opening again leave every file of the user's as it was; only the tier's marked folder comes and goes."""
    users = tmp_path / "data"
    (users / "sub").mkdir(parents=True)
    mine = {users / "train.csv": b"a,b\n", users / "sub" / "0000000000000000000000000000000000000000": b"x"}
    for p, body in mine.items():
        p.write_bytes(body)
    path, storage = _open(tmp_path, "webdataset", disk_cache_mb=0.001, cache_dir=str(users))  # evicts at once
    reader = storage.open(path)
    reader.read_batch([16])
    reader.read_batch([30])
    reader.close()
    storage.open(path).close()
    assert all(p.read_bytes() == body for p, body in mine.items())
    assert sorted(p.name for p in users.iterdir()) == ["dlbench-disk-tier", "sub", "train.csv"]


def test_a_tier_folder_the_harness_did_not_make_is_refused(tmp_path):
    from strategies.remote import disktier

    (tmp_path / "dlbench-disk-tier").mkdir()
    (tmp_path / "dlbench-disk-tier" / "keep.txt").write_text("mine")
    with pytest.raises(ValueError, match="was not made by the disk tier"):
        disktier.clear(tmp_path)
    assert (tmp_path / "dlbench-disk-tier" / "keep.txt").read_text() == "mine"
