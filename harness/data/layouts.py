"""The layouts of a source folder (img2dataset's files, webdataset and parquet output, a plain
folder): which one a folder is, and its raw records in a deterministic order (see
harness.data.importer).

Images: JPEG, webp and PNG (img2dataset's ``--encode_format jpg|webp|png``) are read; other image
files (gif, bmp, tiff) are records without an image, counted as unsupported. A caption is a
``.txt`` file / ``txt`` member or column, else img2dataset's ``caption`` (its parquet layout has a
``caption`` column and no ``txt``; the ``.json`` beside a files or webdataset sample has a
``caption`` key). img2dataset's failed downloads (parquet rows whose image is null; in the other
layouts rows of the metadata ``.parquet`` beside the shards whose ``status`` is not ``success``)
are counted apart (``download_failures``), never as corrupt images. A source file that cannot be
read (a tar or parquet cut short, garbage) is a UsageError naming the file.
"""
from __future__ import annotations

import io
import json
import os
import tarfile
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from harness.errors import UsageError

LAYOUTS = ("files", "webdataset", "parquet", "folder")
IMAGE_EXTS = (".jpg", ".jpeg", ".webp", ".png")  # what img2dataset encodes; the importer reads all three
JPEG_EXTS = (".jpg", ".jpeg")
OTHER_IMAGE_EXTS = (".gif", ".bmp", ".tif", ".tiff")  # images the harness does not read (counted)
IMAGE_COLUMNS = ("jpg", "jpeg", "webp", "png")  # img2dataset's parquet image column is named by encode_format
REMEDY = ("pass the folder img2dataset wrote (its --output_folder, layouts files, webdataset or parquet) or a "
          "folder of .jpg, .webp or .png images with same-named .txt captions")


@dataclass
class Record:
    key: str  # sort key and name in messages (a relative path, "shard.tar:key" or "file.parquet:row")
    jpeg: bytes | None  # the encoded image (JPEG, webp or PNG); None: unsupported or a failed download
    caption: str | None
    image_emb: np.ndarray | None = None
    text_emb: np.ndarray | None = None
    failed: str | None = None  # img2dataset's status of a failed download (a parquet row without image)


def damaged(path: Path, err: BaseException) -> UsageError:
    """The one line for a source file that cannot be read."""
    reason = " ".join(f"{type(err).__name__}: {err}".split())
    return UsageError(f"data source file {path} cannot be read ({reason}): it is damaged or cut short; "
                      f"download it again (or remove it from the source)")


def caption_text(data: bytes, where: str) -> str:
    """A caption file's text; one that is not UTF-8 is one line naming it (`where`: the file or tar
    member)."""
    try:
        return data.decode("utf-8").strip()
    except UnicodeDecodeError as err:
        raise UsageError(f"data source file {where}: the caption is not UTF-8 text (byte 0x{data[err.start]:02x} "
                         f"at offset {err.start}); save it as UTF-8, or remove the sample from the source") from None


def walk_files(root: Path) -> Iterator[Path]:
    """Every regular file under root, depth first, names sorted (one directory listing in memory at
    a time)."""
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


def _json_caption(data: bytes | None) -> str | None:
    """img2dataset's per-sample .json: its ``caption`` (None when absent or unreadable)."""
    if data is None:
        return None
    try:
        value = json.loads(data).get("caption")
    except (ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None


def _files_records(root: Path) -> Iterator[Record]:
    """files and folder layouts: every image under root with its .txt (or .json) and .npy files
    beside it."""
    for p in walk_files(root):
        ext = p.suffix.lower()
        if ext not in IMAGE_EXTS:
            if ext in OTHER_IMAGE_EXTS:
                yield Record(str(p.relative_to(root)), None, None)  # counted as unsupported
            continue
        stem = p.with_suffix("")
        txt = stem.with_name(stem.name + ".txt")
        if txt.is_file():
            caption = caption_text(txt.read_bytes(), str(txt))
        else:
            meta = stem.with_name(stem.name + ".json")
            caption = _json_caption(meta.read_bytes() if meta.is_file() else None)
        embs = {}
        for name in ("image_emb", "text_emb"):
            npy = stem.with_name(f"{stem.name}.{name}.npy")
            embs[name] = np.load(npy) if npy.is_file() else None
        yield Record(str(p.relative_to(root)), _read(p), caption, embs["image_emb"], embs["text_emb"])


def _tar_members(tar: tarfile.TarFile) -> dict[str, dict[str, tarfile.TarInfo]]:
    members: dict[str, dict[str, tarfile.TarInfo]] = {}
    for m in tar:  # headers only: the data is skipped over
        if not m.isfile():
            continue
        head, _, base = m.name.rpartition("/")
        stem, dot, ext = base.partition(".")
        if not dot or stem.startswith("_") or not stem:
            continue
        members.setdefault(f"{head}/{stem}" if head else stem, {})[ext.lower()] = m
    return members


def _shard_records(shard: Path, tar: tarfile.TarFile) -> Iterator[Record]:
    members = _tar_members(tar)
    for key in sorted(members):
        parts = members[key]
        image = next((parts[e.lstrip(".")] for e in IMAGE_EXTS if e.lstrip(".") in parts), None)
        where = f"{shard.name}:{key}"
        if image is None:
            if any(e.lstrip(".") in parts for e in OTHER_IMAGE_EXTS):
                yield Record(where, None, None)  # an image the harness does not read
            continue

        def get(ext: str, parts: dict[str, tarfile.TarInfo] = parts) -> bytes | None:
            m = parts.get(ext)
            return tar.extractfile(m).read() if m is not None else None

        txt = get("txt")
        caption = caption_text(txt, f"{shard}:{key}.txt") if txt is not None else _json_caption(get("json"))
        embs = {name: get(f"{name}.npy") for name in ("image_emb", "text_emb")}
        yield Record(where, tar.extractfile(image).read(), caption,
                     *(np.load(io.BytesIO(b)) if b is not None else None for b in embs.values()))


def _tar_records(root: Path) -> Iterator[Record]:
    for shard in sorted(root.glob("*.tar")):
        try:
            with tarfile.open(shard, "r:*") as tar:
                yield from _shard_records(shard, tar)
        except (tarfile.TarError, EOFError, OSError) as err:
            raise damaged(shard, err) from None


def _schema_names(path: Path) -> list[str]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.read_schema(path).names
    except (pa.ArrowException, OSError) as err:
        raise damaged(path, err) from None


def image_column(names: list[str]) -> str | None:
    return next((c for c in IMAGE_COLUMNS if c in names), None)


def _parquet_image_files(root: Path) -> list[Path]:
    return [p for p in sorted(root.glob("*.parquet")) if image_column(_schema_names(p))]


def _parquet_file_records(path: Path) -> Iterator[Record]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(path)
    names = pf.schema_arrow.names
    image = image_column(names)
    kind = pf.schema_arrow.field(image).type
    if not (pa.types.is_binary(kind) or pa.types.is_large_binary(kind)):
        raise UsageError(f"data source file {path}: its image column {image!r} holds {kind}, not image bytes; "
                         f"write the images' encoded bytes (binary), as img2dataset does")
    columns = [image] + [c for c in ("txt", "caption", "image_emb", "text_emb", "key", "status") if c in names]
    row = 0
    for batch in pf.iter_batches(batch_size=64, columns=columns, use_threads=False):
        cols = {c: batch.column(c).to_pylist() for c in columns}
        for j in range(batch.num_rows):
            caption = cols["txt"][j] if "txt" in cols else None
            if caption is None and "caption" in cols:
                caption = cols["caption"][j]
            name = f"{path.name}:{row}" + (f" (key {cols['key'][j]})" if "key" in cols else "")
            data = cols[image][j]
            failed = None if data is not None else (cols["status"][j] if "status" in cols else None) or "no image"
            yield Record(name, data, caption.strip() if isinstance(caption, str) else None,
                         cols["image_emb"][j] if "image_emb" in cols else None,
                         cols["text_emb"][j] if "text_emb" in cols else None, failed)
            row += 1


def _parquet_records(root: Path) -> Iterator[Record]:
    import pyarrow as pa

    for path in _parquet_image_files(root):
        try:
            yield from _parquet_file_records(path)
        except (pa.ArrowException, OSError) as err:
            raise damaged(path, err) from None


READERS: dict[str, Callable[[Path], Iterator[Record]]] = {
    "files": _files_records, "folder": _files_records, "webdataset": _tar_records, "parquet": _parquet_records}


def download_failures(root: Path, layout: str) -> Counter:
    """img2dataset's failed downloads recorded beside a files or webdataset layout: the rows of its
    metadata ``.parquet`` files (no image column) whose ``status`` is not ``success``, by status.
    (The parquet layout's failed rows are records with ``failed`` set; a plain folder has none.)"""
    import pyarrow as pa
    import pyarrow.parquet as pq

    counts: Counter = Counter()
    if layout not in ("files", "webdataset"):
        return counts
    for path in sorted(root.glob("*.parquet")):
        names = _schema_names(path)
        if "status" not in names or image_column(names):
            continue
        try:
            statuses = pq.read_table(path, columns=["status"]).column("status").to_pylist()
        except (pa.ArrowException, OSError) as err:
            raise damaged(path, err) from None
        counts.update(s or "no status" for s in statuses if s != "success")
    return counts


def _has_image(root: Path, depth: int, exts: tuple[str, ...] = IMAGE_EXTS) -> bool:
    """True when an image lies directly in root (depth 0) or in a subfolder (depth 1, any level
    below)."""
    if depth == 0:
        return any(p.suffix.lower() in exts and p.is_file() for p in root.iterdir())
    for sub in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        for p in walk_files(sub):
            if p.suffix.lower() in exts:
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
    """The layout of the dataset at ``path`` (see the module docstring), or UsageError naming the
    remedy."""
    root = checked_root(path)
    if any(root.glob("*.tar")):
        return "webdataset"
    if _has_image(root, 1):
        return "files"
    parquets = sorted(root.glob("*.parquet"))
    if parquets and _parquet_image_files(root):
        return "parquet"
    if _has_image(root, 0):
        return "folder"
    if parquets:
        raise UsageError(f"data source {root}: its .parquet files have no image column (jpg, webp or png: "
                         f"img2dataset's metadata only?); download with img2dataset --output_format parquet, "
                         f"files or webdataset")
    others = [p for p in walk_files(root) if p.suffix.lower() in OTHER_IMAGE_EXTS]
    if others:
        raise UsageError(f"data source {root} holds {len(others)} images but no JPEG, webp or PNG "
                         f"({others[0].name}); re-download with img2dataset --encode_format jpg")
    raise UsageError(f"data source {root}: unknown layout (no .tar shards, no folders of images, no .parquet "
                     f"with an image column, no .jpg, .webp or .png files); {REMEDY}")


def layout_matches(root: Path, layout: str) -> bool:
    if layout == "webdataset":
        return any(root.glob("*.tar"))
    if layout == "parquet":
        return bool(_parquet_image_files(root))
    return _has_image(root, 0) or _has_image(root, 1)  # files and folder read every image under the root
