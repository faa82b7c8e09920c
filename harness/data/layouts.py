"""The layouts of a source folder (img2dataset's files, webdataset and parquet output, a plain folder): which
one a folder is, and its raw records in a deterministic order (see harness.data.importer)."""
from __future__ import annotations

import io
import os
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from harness.errors import UsageError

LAYOUTS = ("files", "webdataset", "parquet", "folder")
JPEG_EXTS = (".jpg", ".jpeg")
OTHER_IMAGE_EXTS = (".png", ".webp", ".gif", ".bmp", ".tif", ".tiff")
REMEDY = ("pass the folder img2dataset wrote (its --output_folder, layouts files, webdataset or parquet) or a "
          "folder of .jpg images with same-named .txt captions")


@dataclass
class Record:
    key: str  # sort key and name in messages (a relative path, "shard.tar:key" or "file.parquet:row")
    jpeg: bytes | None
    caption: str | None
    image_emb: np.ndarray | None = None
    text_emb: np.ndarray | None = None


def walk_files(root: Path) -> Iterator[Path]:
    """Every regular file under root, depth first, names sorted (one directory listing in memory at a time)."""
    with os.scandir(root) as it:
        entries = sorted(it, key=lambda e: e.name)
    for e in entries:
        if e.name.startswith("."):
            continue
        if e.is_dir(follow_symlinks=False):
            yield from walk_files(Path(e.path))
        elif e.is_file():
            yield Path(e.path)


def _read(path: Path) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _files_records(root: Path) -> Iterator[Record]:
    """files and folder layouts: every .jpg/.jpeg under root with its .txt (and .npy embeddings) beside it."""
    for p in walk_files(root):
        ext = p.suffix.lower()
        if ext not in JPEG_EXTS:
            if ext in OTHER_IMAGE_EXTS:
                yield Record(str(p.relative_to(root)), None, None)  # counted as not a JPEG
            continue
        stem = p.with_suffix("")
        txt = stem.with_name(stem.name + ".txt")
        caption = txt.read_bytes().decode("utf-8").strip() if txt.is_file() else None
        embs = {}
        for name in ("image_emb", "text_emb"):
            npy = stem.with_name(f"{stem.name}.{name}.npy")
            embs[name] = np.load(npy) if npy.is_file() else None
        yield Record(str(p.relative_to(root)), _read(p), caption, embs["image_emb"], embs["text_emb"])


def _tar_records(root: Path) -> Iterator[Record]:
    for shard in sorted(root.glob("*.tar")):
        with tarfile.open(shard, "r:*") as tar:
            members: dict[str, dict[str, tarfile.TarInfo]] = {}
            for m in tar:  # headers only: the data is skipped over
                if not m.isfile():
                    continue
                head, _, base = m.name.rpartition("/")
                stem, dot, ext = base.partition(".")
                if not dot or stem.startswith("_") or not stem:
                    continue
                members.setdefault(f"{head}/{stem}" if head else stem, {})[ext.lower()] = m
            for key in sorted(members):
                parts = members[key]
                jpg = parts.get("jpg") or parts.get("jpeg")
                where = f"{shard.name}:{key}"
                if jpg is None:
                    if any(ext in parts for ext in (e.lstrip(".") for e in OTHER_IMAGE_EXTS)):
                        yield Record(where, None, None)  # an image, not a JPEG
                    continue

                def get(ext: str) -> bytes | None:
                    m = parts.get(ext)
                    return tar.extractfile(m).read() if m is not None else None

                txt = get("txt")
                embs = {name: get(f"{name}.npy") for name in ("image_emb", "text_emb")}
                yield Record(where, tar.extractfile(jpg).read(),
                             txt.decode("utf-8").strip() if txt is not None else None,
                             *(np.load(io.BytesIO(b)) if b is not None else None for b in embs.values()))


def _parquet_image_files(root: Path) -> list[Path]:
    import pyarrow.parquet as pq

    return [p for p in sorted(root.glob("*.parquet")) if "jpg" in pq.read_schema(p).names]


def _parquet_records(root: Path) -> Iterator[Record]:
    import pyarrow.parquet as pq

    for path in _parquet_image_files(root):
        pf = pq.ParquetFile(path)
        names = pf.schema_arrow.names
        columns = ["jpg"] + [c for c in ("txt", "image_emb", "text_emb", "key") if c in names]
        row = 0
        for batch in pf.iter_batches(batch_size=64, columns=columns, use_threads=False):
            cols = {c: batch.column(c).to_pylist() for c in columns}
            for j in range(batch.num_rows):
                caption = cols["txt"][j] if "txt" in cols else None
                name = f"{path.name}:{row}" + (f" (key {cols['key'][j]})" if "key" in cols else "")
                yield Record(name, cols["jpg"][j],
                             caption.strip() if caption is not None else None,
                             cols["image_emb"][j] if "image_emb" in cols else None,
                             cols["text_emb"][j] if "text_emb" in cols else None)
                row += 1


READERS: dict[str, Callable[[Path], Iterator[Record]]] = {
    "files": _files_records, "folder": _files_records, "webdataset": _tar_records, "parquet": _parquet_records}


def _has_jpeg(root: Path, depth: int) -> bool:
    """True when a .jpg/.jpeg lies directly in root (depth 0) or in a subfolder (depth 1, any level below)."""
    if depth == 0:
        return any(p.suffix.lower() in JPEG_EXTS and p.is_file() for p in root.iterdir())
    for sub in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        for p in walk_files(sub):
            if p.suffix.lower() in JPEG_EXTS:
                return True
    return False


def checked_root(path: Path | str) -> Path:
    root = Path(path).expanduser()
    if not root.exists():
        raise UsageError(f"data source {root} does not exist; {REMEDY}")
    if not root.is_dir():
        raise UsageError(f"data source {root} is a file, not a folder; {REMEDY}")
    if not any(p for p in root.iterdir() if not p.name.startswith(".")):
        raise UsageError(f"data source {root} is empty; {REMEDY}")
    return root.resolve()


def detect_layout(path: Path | str) -> str:
    """The layout of the dataset at ``path`` (see the module docstring), or UsageError naming the remedy."""
    root = checked_root(path)
    if any(root.glob("*.tar")):
        return "webdataset"
    if _has_jpeg(root, 1):
        return "files"
    parquets = sorted(root.glob("*.parquet"))
    if parquets and _parquet_image_files(root):
        return "parquet"
    if _has_jpeg(root, 0):
        return "folder"
    if parquets:
        raise UsageError(f"data source {root}: its .parquet files have no jpg column (img2dataset's metadata "
                         f"only?); download with img2dataset --output_format parquet, files or webdataset")
    others = [p for p in walk_files(root) if p.suffix.lower() in OTHER_IMAGE_EXTS]
    if others:
        raise UsageError(f"data source {root} holds {len(others)} images but no JPEG ({others[0].name}); the "
                         f"harness reads JPEGs: re-download with img2dataset --encode_format jpg")
    raise UsageError(f"data source {root}: unknown layout (no .tar shards, no folders of .jpg, no .parquet with a "
                     f"jpg column, no .jpg files); {REMEDY}")


def layout_matches(root: Path, layout: str) -> bool:
    if layout == "webdataset":
        return any(root.glob("*.tar"))
    if layout == "parquet":
        return bool(_parquet_image_files(root))
    return _has_jpeg(root, 0) or _has_jpeg(root, 1)  # files and folder read every .jpg under the root
