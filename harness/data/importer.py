"""Bring your own data: read an existing image-caption dataset as a stream of :class:`Sample`s.

Layouts (``detect_layout`` picks the first that matches, or pass ``layout``; harness.data.layouts
reads them):

``webdataset``  ``*.tar`` shards at the top of the folder (img2dataset ``--output_format
                webdataset``); per sample the members ``<key>.jpg`` (or ``.jpeg``, ``.webp``,
                ``.png``), ``<key>.txt`` (else the ``caption`` of ``<key>.json``) and optionally
                ``<key>.image_emb.npy`` / ``<key>.text_emb.npy``.
``files``       images in subfolders (img2dataset ``--output_format files``: ``00000/0000000.jpg``
                with ``0000000.txt`` and ``0000000.json`` beside it); optionally
                ``<stem>.image_emb.npy`` and ``<stem>.text_emb.npy`` beside the image.
``parquet``     ``*.parquet`` files at the top with a binary image column named by img2dataset's
                ``--encode_format`` (``jpg``, ``webp`` or ``png``) and a caption column (``txt``,
                else img2dataset's ``caption``); optional ``image_emb`` / ``text_emb`` list
                columns. (The metadata ``.parquet`` files img2dataset writes beside files and tar
                shards have no image column.)
``folder``      a plain folder of ``.jpg``/``.jpeg``/``.webp``/``.png`` images with same-named
                ``.txt`` captions.

A source named ``s3://bucket/prefix`` is first mirrored into a local folder (harness.data.bucket:
the standard AWS resolution of endpoint and credentials; only new or changed objects are fetched),
then read as above; its identity is the URL.

Order: deterministic for given files: files and folder by relative path; webdataset by shard name,
then key within the shard; parquet by file name, then row. img2dataset writes a parquet file's rows
in the order its downloads completed, not in key order, so two downloads of one url list may number
samples differently (the key of every row is in messages; the source's identity, ``key()``, changes
with the files anyway). Samples are numbered 0..N-1 in that order, after skipping failed downloads
and corrupt images.

Failed downloads: img2dataset's parquet layout keeps a row with a null image for each url it could
not fetch or decode; files and webdataset keep them in the metadata ``.parquet`` beside
(``status``). They are counted in :class:`ImportStats` (``failed_downloads``, by status), never as
corrupt images.

Corrupt images: every image is decoded (at reduced size, PIL; libjpeg's draft mode for JPEGs) while
scanning; one that is not a JPEG, webp or PNG, or does not decode (truncated, garbage) is skipped
and counted, or raises :class:`UsageError` with ``strict=True``. ``formats`` counts the imported
images by format: the ``simplejpeg`` decoder reads JPEGs only and hands every other image to PIL
(harness.data.decoders), so the non-JPEG count is the number of images each epoch that decoder
decodes with PIL. Captions: an image without a caption is an error naming the first one
(``missing_captions="empty"`` imports it with an empty caption instead, counted). A source file
that cannot be read (a tar or parquet cut short) is a UsageError naming it.

Embeddings, for the features workload, unless the source has them (2048 and 768 float32):

* image: the image decoded in JPEG draft mode, converted to RGB, resized to 32x32 (bilinear, aspect
  not kept), scaled to [0, 1] minus 0.5, flattened in HWC order to 3072 values, multiplied by a
  fixed Gaussian matrix float32[3072, 2048] drawn from
  ``numpy.random.default_rng(PROJECTION_SEED)``, then L2-normalised;
* text: the caption lower-cased and split on whitespace; each token maps to a float32[768] Gaussian
  vector seeded by the first 8 bytes of its BLAKE2b digest; the vectors are summed and
  L2-normalised (an empty caption gets the unit vector drawn from ``default_rng(PROJECTION_SEED +
  1)``).

They are deterministic on a given machine; the matrix product is float32 BLAS, so another BLAS
library may differ in the last bits. That changes nothing the benchmark measures (they are
stand-ins of the right size).

:class:`SourceSpec` has what a materialisation needs from a dataset spec: ``key()`` (path, layout,
options and every file's relative path, size and modification time), ``samples`` / ``count()``,
``iter_samples()`` (one sample at a time: bounded memory), ``image_sides()``, ``jpeg_flags()``,
``to_dict()``. ``count()`` scans the source once (cached).
"""
from __future__ import annotations

import hashlib
import io
import json
import os
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path

import numpy as np

from harness import safewrite
from harness.data import bucket
from harness.data.embeddings import (
    PROJECTION_SEED,
    PROJECTION_SIDE,
    checked_embedding,
    decode_checked,
    decode_small,
    image_embedding,
    text_embedding,
)
from harness.data.layouts import (
    LAYOUTS,
    READERS,
    REMEDY,
    Record,
    checked_root,
    detect_layout,
    download_failures,
    layout_matches,
    walk_files,
)
from harness.errors import UsageError
from strategies.sample import IMAGE_EMB_DIM, TEXT_EMB_DIM, Sample

IMPORTER_VERSION = 2  # part of SourceSpec.key(): bump when the samples made from a source change
MISSING_CAPTIONS = ("error", "empty")
MAX_LISTED = 20  # corrupt keys kept by name in ImportStats (all are counted)


@dataclass
class ImportStats:
    layout: str
    candidates: int = 0  # images seen (failed downloads not included)
    samples: int = 0  # imported
    corrupt: int = 0  # skipped: not a JPEG, webp or PNG, or not decodable
    corrupt_keys: list[str] = field(default_factory=list)  # the first MAX_LISTED of them, with the reason
    empty_captions: int = 0  # imported with an empty caption (missing_captions="empty")
    embeddings: str = "projection"  # "source" when the source had both embeddings for every sample
    failed_downloads: int = 0  # img2dataset's urls it did not download (rows without image, or metadata)
    failed_statuses: dict[str, int] = field(default_factory=dict)  # those by img2dataset's status
    formats: dict[str, int] = field(default_factory=dict)  # imported images by format ("JPEG", "WEBP", "PNG")

    @property
    def non_jpeg(self) -> int:
        """Imported images that are not JPEGs: the simplejpeg decoder hands each to PIL."""
        return sum(n for fmt, n in self.formats.items() if fmt != "JPEG")

    def to_dict(self) -> dict:
        return dict(vars(self), non_jpeg=self.non_jpeg)

    @classmethod
    def from_dict(cls, doc: dict) -> ImportStats:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in doc.items() if k in known})


# ---- the source ----


class SourceSpec:
    """An existing dataset as the harness's data source (see the module docstring).

    ``layout``: one of LAYOUTS, or None to detect it. ``strict``: a corrupt image raises instead of
    being skipped. ``missing_captions``: "error" (default) or "empty". ``limit``: import only the
    first N samples.
    """

    def __init__(self, path: Path | str, layout: str | None = None, strict: bool = False,
                 missing_captions: str = "error", limit: int | None = None):
        self.url = bucket.url_of(path)  # s3://bucket/prefix: mirrored locally, then read as a folder
        self.root = checked_root(bucket.mirror(self.url) if self.url else path)
        if layout is None:
            layout = detect_layout(self.root)
        elif layout not in LAYOUTS:
            raise UsageError(f"unknown data format {layout!r}; known: {', '.join(LAYOUTS)} (or leave it out to "
                             f"detect it)")
        elif not layout_matches(self.root, layout):
            raise UsageError(f"data source {self.root} does not hold the {layout} layout; leave out the data "
                             f"format to detect it, or {REMEDY}")
        if missing_captions not in MISSING_CAPTIONS:
            raise ValueError(f"missing_captions must be one of {', '.join(MISSING_CAPTIONS)}")
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
            raise ValueError(f"limit must be an integer >= 1, got {limit!r}")
        self.layout, self.strict, self.missing_captions, self.limit = layout, strict, missing_captions, limit
        self._key: str | None = None
        self._stats: ImportStats | None = None
        self._sides: np.ndarray | None = None
        self._jpeg: np.ndarray | None = None  # bool[N]: which samples' images are JPEGs
        self._skip: set[str] = set()

    # -- identity --

    def to_dict(self) -> dict:
        return {"source": self.url or str(self.root), "layout": self.layout, "missing_captions": self.missing_captions,
                "limit": self.limit, "importer_version": IMPORTER_VERSION}

    def key(self) -> str:
        """Short stable hash of the source (path, layout, options, every file's path, size and
        mtime)."""
        if self._key is None:
            h = hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode("utf-8"))
            h.update(f"projection {PROJECTION_SEED} {PROJECTION_SIDE}\n".encode())
            for p in walk_files(self.root):
                st = p.stat()
                h.update(f"{p.relative_to(self.root)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
            self._key = "src-" + h.hexdigest()[:12]
        return self._key

    # -- one pass over the source: what is usable --

    def _records(self) -> Iterator[Record]:
        return READERS[self.layout](self.root)

    def _usable(self, rec: Record, stats: ImportStats) -> tuple[np.ndarray, tuple[int, int], str] | None:
        """The decoded thumbnail, sides and format of a record, or None when it is skipped
        (counted)."""
        if rec.failed is not None:  # img2dataset could not download it: not an image of the source
            stats.failed_downloads += 1
            stats.failed_statuses[rec.failed] = stats.failed_statuses.get(rec.failed, 0) + 1
            self._skip.add(rec.key)
            return None
        stats.candidates += 1
        try:
            if rec.jpeg is None:
                raise ValueError("not a JPEG, webp or PNG")
            small, sides, fmt = decode_checked(rec.jpeg)
        except ValueError as err:
            if self.strict:
                raise UsageError(f"{self.root}/{rec.key} is not a readable image ({err}); remove it, or run "
                                 f"without --strict-data to skip corrupt images (they are counted)") from None
            stats.corrupt += 1
            if len(stats.corrupt_keys) < MAX_LISTED:
                stats.corrupt_keys.append(f"{rec.key}: {err}")
            self._skip.add(rec.key)
            return None
        if rec.caption is None:
            if self.missing_captions == "error":
                raise UsageError(f"{self.root}/{rec.key} has no caption (a same-named .txt, a txt member or "
                                 f"column, or img2dataset's caption column or .json caption); add the captions "
                                 f"(img2dataset writes them when given --caption_col)")
            stats.empty_captions += 1
        stats.formats[fmt] = stats.formats.get(fmt, 0) + 1
        return small, sides, fmt

    def save_scan(self, directory: Path | str) -> Path:
        """Write the scan (stats, every skipped key, image sides, JPEG flags) as
        ``<key>.scan.json`` + ``<key>.sides.npy`` + ``<key>.jpeg.npy`` in ``directory``, so a later
        run over the unchanged source skips the scan (see ``load_scan``)."""
        stats = self.scan()
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        for name, array in (("sides", self._sides), ("jpeg", self._jpeg)):  # never through a link (safewrite)
            data = io.BytesIO()
            np.save(data, array)
            safewrite.write_bytes(directory / f"{self.key()}.{name}.npy", data.getvalue())
        doc = {"key": self.key(), "stats": stats.to_dict(), "skip": sorted(self._skip)}
        # the json last: it marks a complete scan
        safewrite.write_text(directory / f"{self.key()}.scan.json", json.dumps(doc))
        return directory / f"{self.key()}.scan.json"

    def load_scan(self, directory: Path | str) -> bool:
        """Take the scan ``save_scan`` wrote for this source (same key: same files, sizes and
        mtimes); False when there is none."""
        directory = Path(directory)
        try:
            doc = json.loads((directory / f"{self.key()}.scan.json").read_text())
            sides = np.load(directory / f"{self.key()}.sides.npy")
            jpeg = np.load(directory / f"{self.key()}.jpeg.npy")
        except (OSError, ValueError):
            return False
        if doc.get("key") != self.key() or not len(sides) == len(jpeg) == doc["stats"]["samples"]:
            return False
        self._stats, self._sides, self._skip = ImportStats.from_dict(doc["stats"]), sides, set(doc["skip"])
        self._jpeg = jpeg.astype(bool)
        return True

    def scan(self, progress: Callable[[int], None] | None = None) -> ImportStats:
        """Read every record once: count the usable ones, note the corrupt ones, record image
        sides. Cached (in memory; on disk with ``save_scan`` / ``load_scan``). ``progress`` is
        called with the number of records read so far."""
        if self._stats is not None:
            return self._stats
        stats = ImportStats(layout=self.layout)
        for status, n in sorted(download_failures(self.root, self.layout).items()):
            stats.failed_downloads += n
            stats.failed_statuses[status] = n
        sides = array("i")
        jpeg = array("b")
        with_embs = True
        self._skip = set()
        for rec in self._records():
            got = self._usable(rec, stats)
            if progress is not None:
                progress(stats.candidates)
            if got is None:
                continue
            sides.extend(got[1])
            jpeg.append(got[2] == "JPEG")
            with_embs = with_embs and rec.image_emb is not None and rec.text_emb is not None
            stats.samples += 1
            if self.limit is not None and stats.samples >= self.limit:
                break
        if stats.samples == 0:
            what = f"{stats.corrupt} corrupt or unsupported images" if stats.corrupt else "no images"
            if stats.failed_downloads:
                what += f", {stats.failed_downloads} failed downloads"
            raise UsageError(f"data source {self.root} ({self.layout} layout) has no usable sample ({what}); "
                             f"{REMEDY}")
        stats.embeddings = "source" if with_embs else "projection"
        stats.failed_statuses = dict(sorted(stats.failed_statuses.items()))
        stats.formats = dict(sorted(stats.formats.items()))
        self._sides = np.frombuffer(sides, dtype=np.int32).reshape(-1, 2).copy()
        self._jpeg = np.frombuffer(jpeg, dtype=np.int8).astype(bool)
        self._stats = stats
        return stats

    def count(self) -> int:
        return self.scan().samples

    @property
    def samples(self) -> int:
        return self.count()

    @property
    def stats(self) -> ImportStats:
        return self.scan()

    def image_sides(self) -> np.ndarray:
        """int32[N, 2]: (height, width) of every sample's image (from the scan)."""
        self.scan()
        return self._sides

    def jpeg_flags(self) -> np.ndarray:
        """bool[N]: True where a sample's image is a JPEG (for
        harness.data.decoders.decoded_pixels's ``jpeg``)."""
        self.scan()
        return self._jpeg

    def iter_samples(self) -> Iterator[Sample]:
        """The samples 0..count()-1 in order, one at a time (bounded memory)."""
        stats = self.scan()
        n = 0
        for rec in self._records():
            if rec.key in self._skip:
                continue
            if n >= stats.samples:
                break
            where = f"{self.root}/{rec.key}"
            caption = rec.caption if rec.caption is not None else ""
            if stats.embeddings == "source":
                image_emb = checked_embedding(rec.image_emb, IMAGE_EMB_DIM, "image_emb", where)
                text_emb = checked_embedding(rec.text_emb, TEXT_EMB_DIM, "text_emb", where)
            else:
                try:
                    small, _ = decode_small(rec.jpeg)
                except (ValueError, TypeError):
                    raise UsageError(f"{where} changed since the source was scanned; run again") from None
                image_emb, text_emb = image_embedding(small), text_embedding(caption)
            yield Sample(index=n, jpeg=bytes(rec.jpeg), caption=caption, image_emb=image_emb, text_emb=text_emb)
            n += 1
        if n != stats.samples:
            raise UsageError(f"data source {self.root} changed while it was imported ({n} samples, the scan "
                             f"found {stats.samples}); run again")
