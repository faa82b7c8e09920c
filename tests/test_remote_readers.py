"""Other tools read what the s3 storage puts in the bucket, with their own readers, against the project's own
object store (moto's server mode): webdataset's WebDataset streams the tar shards over HTTP (presigned GET
URLs, as a private bucket is read over plain HTTP) and gives the samples the harness's range reader gives;
litdata's StreamingDataset reads the chunks litdata's optimize wrote, from the bucket, through its own S3
client, and so does the s3 storage's litdata format."""
from __future__ import annotations

import io

import numpy as np
import pytest

pytest.importorskip("moto.server", reason="the local object store needs moto's server mode: pip install 'moto[server]'")
pytest.importorskip("obstore", reason="the s3 storage reads through obstore: pip install obstore")

from harness.data.generator import DatasetSpec, generate_sample  # noqa: E402
from harness.data.materialise import materialise  # noqa: E402
from harness.measure import remotecounters  # noqa: E402
from harness.run import remoterun  # noqa: E402
from strategies import registry  # noqa: E402
from strategies.remote.s3client import parse_url  # noqa: E402
from strategies.storage.s3 import read_remote  # noqa: E402

pytestmark = pytest.mark.slow  # the object store is a process of its own (the s3_server fixture)
SPEC = DatasetSpec(samples=40, seed=5, profile="tiny")


def test_webdataset_reads_the_bucket_s_tars_as_the_harness_does(s3_server, tmp_path):
    wds = pytest.importorskip("webdataset")
    import boto3

    params = {"format": "webdataset", "shard_size": 16}
    path = materialise(SPEC, "s3", tmp_path, progress=False, params=params)
    remote = read_remote(path)
    bucket, prefix = parse_url(remote["url"])
    client = boto3.client("s3")  # the standard resolution: the server's AWS environment
    shards = sorted(n for n in remote["objects"] if n.endswith(".tar"))
    urls = [client.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": f"{prefix}/{n}"})
            for n in shards]
    assert all(u.startswith(s3_server.endpoint + "/") for u in urls)  # plain HTTP GETs to the project's store
    streamed = list(wds.WebDataset(urls, shardshuffle=False))
    reader = registry.create("storage", "s3", **params).open(path)
    ours = reader.read_batch(list(range(SPEC.samples)))
    reader.close()
    assert [int(s["__key__"]) for s in streamed] == list(range(SPEC.samples))
    for theirs, mine in zip(streamed, ours):
        assert theirs["jpg"] == mine.jpeg
        assert theirs["txt"].decode("utf-8") == mine.caption
        assert np.array_equal(np.load(io.BytesIO(theirs["image_emb.npy"])), mine.image_emb)
        assert np.array_equal(np.load(io.BytesIO(theirs["text_emb.npy"])), mine.text_emb)
        assert mine.same_as(generate_sample(SPEC, mine.index))


def _same_item(item: dict, i: int) -> bool:
    want = generate_sample(SPEC, i)
    return (int(item["index"]) == i and bytes(item["jpeg"]) == want.jpeg and item["caption"] == want.caption
            and np.array_equal(item["image_emb"], want.image_emb) and np.array_equal(item["text_emb"], want.text_emb))


def test_litdata_reads_the_chunks_from_the_bucket_itself(s3_server, tmp_path):
    litdata = pytest.importorskip("litdata")
    params = {"format": "litdata", "shard_size": 16, "cache_dir": str(tmp_path / "litcache")}
    path = materialise(SPEC, "s3", tmp_path / "data", progress=False, params=params)  # litdata.optimize, uploaded
    remote = read_remote(path)
    assert sorted(remote["objects"]) == ["chunk-0-0.bin", "chunk-0-1.bin", "chunk-0-2.bin", "index.json"]
    # litdata's own reader over the bucket, the endpoint as litdata takes it (storage_options)
    theirs = litdata.StreamingDataset(remote["url"], cache_dir=str(tmp_path / "theirs"),
                                      storage_options={"endpoint_url": s3_server.endpoint})
    assert len(theirs) == SPEC.samples
    assert all(_same_item(theirs[i], i) for i in (0, 17, 39, 16))
    # the s3 storage's litdata format: litdata reading the bucket inside the harness's reader (the local
    # chunks removed: only the bucket has them)
    for chunk in path.glob("chunk-*.bin"):
        chunk.unlink()
    stats = tmp_path / "stats"
    stats.mkdir()
    reader = registry.create("storage", "s3", **params).open(path)
    reader.count_into(stats)  # as the harness tells the reader of a visit
    got = reader.read_batch([39, 0, 17])
    assert [s.index for s in got] == [39, 0, 17]
    assert all(s.same_as(generate_sample(SPEC, s.index)) for s in got)
    reader.close()
    f = remotecounters.figures(stats, registry.create("storage", "s3", **params).label())
    assert f.samples == 3 and f.clients == "litdata"
    assert f.requests_per_sample is None  # litdata's own requests: not counted, shown as "-"
    assert remoterun.row("c", f)[1] == "-"
