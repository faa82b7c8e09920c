"""A user's own dataset in a bucket (``--data s3://bucket/prefix``, or ``[dataset] source``): every
object under the prefix copied once into a local mirror, which the importer then reads like any
folder (harness.data.importer: webdataset tars, parquet files, img2dataset's files layout, a plain
folder).

Endpoint, region and credentials are resolved the standard way by botocore (AWS environment
variables, ~/.aws/config and ~/.aws/credentials, AWS_PROFILE, a profile's endpoint_url). The mirror
is ``$DLBENCH_S3_MIRROR/<bucket>/<prefix>/`` (default ``~/.cache/dlbench/s3``); an object already
there at the same size and ETag (recorded in the folder's ``.s3-mirror.json``) is not fetched
again, and each file's mtime is the object's LastModified, so the importer's source key (paths,
sizes, mtimes) changes exactly when the bucket's objects do. One LIST per 1000 objects and one GET
per object not yet mirrored.

The bucket and the prefix are checked before anything is created: a ``.`` or ``..`` part, an empty
part (``//``, a leading ``/``) or a mirror folder that resolves outside the mirror's base is
refused with one line naming the part. Every file is written through harness.safewrite (no write
through a symbolic link).

The prefix matches whole path segments (``s3://b/data`` mirrors ``data/...``, never ``data2/...``
or ``database.csv``), and a key whose path would leave the mirror (an absolute key, a ``..``
segment) is refused with one line naming it, before anything is written.

A path written ``s3://...`` arrives as ``s3:/...`` where it went through ``pathlib.Path``
(argparse's ``type=Path``): both are read as the URL.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

from harness import safewrite
from harness.errors import UsageError
from strategies.remote.s3client import parse_url

MIRROR_ENV = "DLBENCH_S3_MIRROR"
TIMEOUT_S = 20.0  # each request to the endpoint: connect and read, two attempts
INDEX = ".s3-mirror.json"


def url_of(path: Path | str) -> str | None:
    """``s3://bucket/prefix`` when ``path`` names one (also as pathlib writes it,
    ``s3:/bucket/prefix``)."""
    text = str(path)
    if text.startswith("s3://"):
        return text
    if text.startswith("s3:/"):
        return "s3://" + text[len("s3:/"):]
    return None


def mirror_base() -> Path:
    return Path(os.environ.get(MIRROR_ENV) or Path.home() / ".cache" / "dlbench" / "s3").expanduser()


def mirror_root(url: str) -> Path:
    """base/bucket/prefix, checked to lie under the mirror's base (`checked_parts`); nothing is
    created."""
    bucket, prefix = checked_parts(url)
    base = mirror_base()
    root = base / bucket / prefix
    if not root.resolve().is_relative_to(base.resolve()):
        raise UsageError(f"--data {url}: the mirror folder {root} resolves to {root.resolve()}, outside the "
                         f"mirror base {base} (a symbolic link on the way); remove the link or set {MIRROR_ENV}")
    return root


def checked_parts(url: str) -> tuple[str, str]:
    """(bucket, prefix) of the URL; a UsageError naming the bucket or prefix with a part that is
    empty, ``.`` or ``..`` (the mirror folder would be another one, or outside the mirror base)."""
    try:
        bucket, prefix = parse_url(url)
    except ValueError as err:
        raise UsageError(f"--data {url}: {err}") from None
    raw = url[len("s3://"):].partition("/")[2].rstrip("/")  # as given: a leading '/' is an empty part
    for what, text, parts in (("bucket", bucket, [bucket]), ("prefix", raw, raw.split("/") if raw else [])):
        bad = next((p for p in parts if p in ("", ".", "..") or "\0" in p), None)
        if bad is not None:
            raise UsageError(f"--data {url}: the {what} {text!r} has the part {bad!r} (empty, '.' or '..'), "
                             f"which a mirror folder cannot follow; name the {what} as the store lists it, "
                             f"without such parts (s3://BUCKET/PREFIX)")
    return bucket, prefix


def mirror(url: str, progress=None) -> Path:
    """The prefix's objects in the local mirror (fetched where missing or changed); the mirror's
    folder."""
    import boto3
    from botocore.config import Config

    bucket, prefix = checked_parts(url)
    root = mirror_root(url)  # checked before anything is created
    known = _read_index(root)
    before = dict(known)
    client = boto3.client("s3", config=Config(connect_timeout=TIMEOUT_S, read_timeout=TIMEOUT_S,
                                              retries={"max_attempts": 2}))
    print(f"bucket: listing {url} at {client.meta.endpoint_url} (each request waits at most {TIMEOUT_S:g} s)",
          file=sys.stderr)
    try:
        listed = [o for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
                  for o in page.get("Contents", []) if not o["Key"].endswith("/")]
        objects = [(o, safe_relative(url, root, prefix, o["Key"])) for o in listed if under_prefix(prefix, o["Key"])]
        if not objects:
            raise UsageError(f"--data {url}: no object under this prefix at {client.meta.endpoint_url}; give the "
                             f"prefix that holds the dataset's files (s3://BUCKET/PREFIX)")
        check_layout(url, [rel for _, rel in objects])
        safewrite.make_dir(root, mirror_base())
        todo = [(o, rel) for o, rel in objects if not _mirrored(root, known, o, rel)]
        check_space(url, root, sum(o["Size"] for o, _ in todo))
        for k, (o, rel) in enumerate(todo):
            safewrite.make_dir((root / rel).parent, root)
            _fetch(client, bucket, o, root / rel)
            known[rel] = o.get("ETag", "")
            if progress is not None:
                progress(k + 1, len(todo))
    except UsageError:
        raise
    except Exception as err:  # noqa: BLE001 - botocore's ClientError, EndpointConnectionError, NoCredentials
        text = " ".join(str(err).split())[:200]
        raise UsageError(f"--data {url}: reading the bucket failed ({text}); check the url, the endpoint "
                         f"(AWS_ENDPOINT_URL or a profile's endpoint_url) and the credentials") from None
    finally:
        if known != before:
            _write_index(root, known)
    return root


def _mirrored(root: Path, known: dict[str, str], obj: dict, rel: str) -> bool:
    target = root / rel
    return known.get(rel) == obj.get("ETag", "") and target.is_file() and target.stat().st_size == obj["Size"]


def _fetch(client, bucket: str, obj: dict, target: Path) -> None:
    """One object into its file: downloaded beside it and renamed into place; a failed download
    leaves nothing."""
    partial = target.with_name(f".{target.name}.part")
    try:
        client.download_file(bucket, obj["Key"], str(partial))
        stamp = obj["LastModified"].timestamp()
        os.utime(partial, (stamp, stamp))
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)


def check_layout(url: str, rels: list[str]) -> None:
    """No key is both an object and a folder of other objects (``a`` and ``a/b``): a folder cannot
    hold both."""
    files = set(rels)
    for rel in rels:
        parts = rel.split("/")
        clash = next(("/".join(parts[:i]) for i in range(1, len(parts)) if "/".join(parts[:i]) in files), None)
        if clash is not None:
            raise UsageError(f"--data {url}: the object {clash!r} is also the folder of {rel!r}; a local mirror "
                             f"cannot hold both: rename one of them in the bucket")


def check_space(url: str, root: Path, needed: int) -> None:
    free = shutil.disk_usage(root).free
    if needed > free:
        raise UsageError(f"--data {url}: the objects still to mirror take {needed / 1e9:.2f} GB and {root} has "
                         f"{free / 1e9:.2f} GB free; free some space, or set {MIRROR_ENV} to a larger disk")


def under_prefix(prefix: str, key: str) -> bool:
    """The key lies under the prefix as a folder: whole path segments (``data`` holds ``data/x``,
    not ``data2``)."""
    return not prefix or prefix.endswith("/") or key.startswith(prefix + "/")


def safe_relative(url: str, root: Path, prefix: str, key: str) -> str:
    """The key's path inside the mirror; a key that would land outside it is a UsageError naming
    the key."""
    rel = key[len(prefix):].lstrip("/")
    parts = rel.split("/")
    inside = (root / rel).resolve().is_relative_to(root.resolve())
    if not rel or key.startswith("/") or ".." in parts or "" in parts or "." in parts or not inside:
        raise UsageError(f"--data {url}: the object {key!r} would be written outside the mirror {root} (an "
                         f"absolute key or a '..' path segment); nothing was copied: remove or rename the object")
    return rel


def _read_index(root: Path) -> dict[str, str]:
    try:
        return json.loads((root / INDEX).read_text())
    except (OSError, ValueError):
        return {}


def _write_index(root: Path, known: dict[str, str]) -> None:
    safewrite.write_text(root / INDEX, json.dumps(known, sort_keys=True), root)
