"""A user's own dataset in a bucket (--data s3://bucket/prefix): mirrored once from the project's own object
store (moto's server mode), then imported like a local folder; the mirror refetches only what changed, and
the source's key follows the bucket's objects."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("moto.server", reason="the local object store needs moto's server mode: pip install 'moto[server]'")
pytestmark = pytest.mark.slow  # the object store is a process of its own

from harness.data.bucket import MIRROR_ENV, url_of  # noqa: E402
from harness.data.generator import DatasetSpec, generate_sample  # noqa: E402
from harness.data.importer import SourceSpec  # noqa: E402
from harness.errors import UsageError  # noqa: E402
from harness.lab.server import ObjectServer  # noqa: E402

SPEC = DatasetSpec(samples=6, seed=2, profile="tiny")


@pytest.fixture
def bucket(tmp_path, monkeypatch):
    import boto3

    monkeypatch.setenv(MIRROR_ENV, str(tmp_path / "mirror"))
    with ObjectServer("dlbench") as s:
        for key, value in s.env().items():
            monkeypatch.setenv(key, value)
        client = boto3.client("s3")
        for i in range(SPEC.samples):  # the plain folder layout: an image and its caption beside it
            sample = generate_sample(SPEC, i)
            client.put_object(Bucket="dlbench", Key=f"mine/{i:03d}.jpg", Body=sample.jpeg)
            client.put_object(Bucket="dlbench", Key=f"mine/{i:03d}.txt", Body=sample.caption.encode())
        yield client


def test_a_bucket_prefix_is_imported_like_a_folder(bucket, tmp_path):
    source = SourceSpec("s3://dlbench/mine")
    assert source.layout == "folder" and source.to_dict()["source"] == "s3://dlbench/mine"
    assert source.root == (tmp_path / "mirror" / "dlbench" / "mine").resolve()
    assert sorted(p.name for p in source.root.iterdir() if not p.name.startswith("."))[:2] == ["000.jpg", "000.txt"]
    key = source.key()
    again = SourceSpec(Path("s3://dlbench/mine"))  # as argparse's type=Path hands it over: s3:/dlbench/mine
    assert again.key() == key  # nothing changed: nothing refetched, the same source
    bucket.put_object(Bucket="dlbench", Key="mine/002.txt", Body=b"another caption")
    assert SourceSpec("s3://dlbench/mine").key() != key
    assert (source.root / "002.txt").read_bytes() == b"another caption"


def test_an_empty_prefix_or_a_missing_bucket_is_one_line(bucket):
    with pytest.raises(UsageError, match=r"^--data s3://dlbench/nothing: no object under this prefix"):
        SourceSpec("s3://dlbench/nothing")
    with pytest.raises(UsageError, match=r"^--data s3://no-such-bucket/x: reading the bucket failed .*NoSuchBucket"):
        SourceSpec("s3://no-such-bucket/x")


def test_url_of():
    assert url_of("s3://b/p") == "s3://b/p" and url_of(Path("s3://b/p")) == "s3://b/p"
    assert url_of("/data/s3/x") is None and url_of(os.path.join("rel", "s3:")) is None


def test_run_bench_takes_data_s3(bucket, tmp_path, capsys):
    """--data s3://... through the command line (argparse's type=Path makes it s3:/...): the scenario's
    dataset is the bucket's, mirrored."""
    from harness import cli

    code = cli.main(["--scenario", "smoke", "--data", "s3://dlbench/mine", "--dry-run", "--out", str(tmp_path)])
    assert code == 0, capsys.readouterr().err
    assert (tmp_path / "mirror" / "dlbench" / "mine" / "005.jpg").is_file()


@pytest.fixture
def hostile(tmp_path, monkeypatch, bucket):
    """The bucket of `bucket` with keys a bucket's owner could write: a '..' path, an absolute key, and
    neighbours of the prefix `data` that are not under it as a folder."""
    mirror = tmp_path / "mirror"
    for key in ("data/ok.txt", "data2/secret.txt", "database.csv"):
        bucket.put_object(Bucket="dlbench", Key=key, Body=b"x")
    return mirror


def test_a_key_that_would_leave_the_mirror_is_refused_and_nothing_is_written(hostile, bucket, tmp_path):
    bucket.put_object(Bucket="dlbench", Key="evil/../../../../../escaped.txt", Body=b"owned")
    before = {p for p in tmp_path.rglob("*")}
    with pytest.raises(UsageError, match=r"^--data s3://dlbench/evil: the object 'evil/\.\./.*' would be written "
                                         r"outside the mirror"):
        SourceSpec("s3://dlbench/evil")
    assert {p for p in tmp_path.rglob("*") if p.is_file()} == {p for p in before if p.is_file()}
    assert not (tmp_path / "escaped.txt").exists() and not any(tmp_path.parent.glob("escaped.txt"))


def test_an_absolute_key_with_an_empty_prefix_is_refused(hostile, bucket):
    bucket.put_object(Bucket="dlbench", Key="/etc/dlbench-owned", Body=b"owned")
    with pytest.raises(UsageError, match=r"the object '/etc/dlbench-owned' would be written outside the mirror"):
        SourceSpec("s3://dlbench")
    assert not Path("/etc/dlbench-owned").exists()


def test_the_prefix_matches_whole_path_segments(hostile):
    from harness.data.bucket import mirror

    root = mirror("s3://dlbench/data")
    assert sorted(p.name for p in root.rglob("*") if p.is_file() and not p.name.startswith(".")) == ["ok.txt"]


def test_a_scenarios_dataset_source_may_be_a_bucket(bucket, tmp_path):
    """[dataset] source = "s3://..." (documented) is the bucket, not a folder beside the scenario file."""
    from harness.config import scenario

    text = scenario.resolve_path("smoke").read_text()
    text = text.replace("[dataset]\n", '[dataset]\nsource = "s3://dlbench/mine"\n', 1)
    (tmp_path / "s.toml").write_text(text)
    sc = scenario.load(str(tmp_path / "s.toml"))
    assert sc.dataset.root == (tmp_path / "mirror" / "dlbench" / "mine").resolve()


def test_a_key_that_is_also_a_folder_is_named_and_nothing_is_fetched(bucket, tmp_path):
    """It was blamed on "the url, the endpoint and the credentials"."""
    bucket.put_object(Bucket="dlbench", Key="both/a", Body=b"x")
    bucket.put_object(Bucket="dlbench", Key="both/a/b.txt", Body=b"y")
    with pytest.raises(UsageError, match=r"^--data s3://dlbench/both: the object 'a' is also the folder of 'a/b\.txt'"):
        SourceSpec("s3://dlbench/both")
    assert not [p for p in (tmp_path / "mirror").rglob("*") if p.is_file() and not p.name.startswith(".")]


def test_a_failed_download_leaves_no_part_file(bucket, tmp_path, monkeypatch):
    from harness.data import bucket as bucket_mod

    def broken(self, bucket_name, key, filename, *args, **kwargs):
        Path(filename).write_bytes(b"half")
        raise OSError("connection reset")

    monkeypatch.setattr("boto3.s3.inject.download_file", broken)
    with pytest.raises(UsageError, match="reading the bucket failed"):
        bucket_mod.mirror("s3://dlbench/mine")
    assert not list((tmp_path / "mirror").rglob("*.part"))


def test_the_free_space_is_checked_before_anything_is_fetched(bucket, tmp_path, monkeypatch):
    import shutil as shutil_mod

    from harness.data import bucket as bucket_mod

    usage = shutil_mod.disk_usage(tmp_path)
    monkeypatch.setattr(bucket_mod.shutil, "disk_usage", lambda p: usage._replace(free=10))
    with pytest.raises(UsageError, match=r"still to mirror take 0\.00 GB and .* has 0\.00 GB free"):
        bucket_mod.mirror("s3://dlbench/mine")
    assert not [p for p in (tmp_path / "mirror").rglob("*") if p.is_file()]
