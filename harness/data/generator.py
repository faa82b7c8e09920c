"""A deterministic CC3M-like sample generator.

Every sample is a pure function of ``(spec, index)``: it draws from
``np.random.default_rng([spec.seed, index])``, so any sample can be regenerated
on its own (for verification, or by any rank) without generating the others.
The image sides are the first draws of that stream, which lets
:func:`image_sides` compute every sample's size without encoding a JPEG.

With ``classes = C`` (default 0: none) every sample has a class, laid out in clusters in storage
order as real downloads are (sorted by source, domain or class): sample i is of class ``i * C //
samples`` (:func:`class_labels`, a pure function of the spec, like the image sides; the storages do
not store it). The class is learnable: each sample's image embedding leans towards its class's
centroid (CLASS_SIGNAL). The other fields, and the draws of every sample's stream, are those of the
dataset without classes.
"""
from __future__ import annotations

import hashlib
import io
import itertools
import json
import os
import signal
from collections import deque
from collections.abc import Iterator
from dataclasses import asdict, dataclass

import numpy as np
from PIL import Image, ImageDraw

from strategies.sample import IMAGE_EMB_DIM, TEXT_EMB_DIM, Sample

# Bump when the output of generate_sample changes for any (spec, index): it is part of
# DatasetSpec.key(), so a changed generator never reuses an old materialisation.
GENERATOR_VERSION = 1

JPEG_QUALITY = 85
CLASS_SIGNAL = 0.5  # the weight of the class centroid in a sample's image embedding (before normalising)
CONTENTS = ("all", "features")
MIN_SIDE = 16

# Size distributions. The "cc3m" numbers are approximations of CC3M's spread (web images
# of widely varying size and shape, captions of ~10 tokens on average), chosen by hand;
# they are not measured from the real set.
#   long_median/long_sigma: log-normal longer image side (px), clipped to long_clip
#   aspect_median/aspect_sigma: log-normal width/height ratio, clipped to aspect_clip
#   words_median/words_sigma: log-normal caption length (words), clipped to words_clip
PROFILES: dict[str, dict] = {
    "cc3m": {
        "long_median": 500.0,
        "long_sigma": 0.45,
        "long_clip": (64, 1600),
        "aspect_median": 4.0 / 3.0,
        "aspect_sigma": 0.35,
        "aspect_clip": (1.0 / 3.0, 3.0),
        "words_median": 9.4,
        "words_sigma": 0.42,
        "words_clip": (3, 40),
    },
    "tiny": {
        "long_median": 64.0,
        "long_sigma": 0.3,
        "long_clip": (24, 160),
        "aspect_median": 4.0 / 3.0,
        "aspect_sigma": 0.3,
        "aspect_clip": (0.5, 2.0),
        "words_median": 9.4,
        "words_sigma": 0.42,
        "words_clip": (3, 40),
    },
}

VOCABULARY = tuple(
    """
    a an the of in on at with and by for from to near under over behind during
    person man woman child boy girl people crowd family couple friends player actor artist
    dog cat horse bird fish cow sheep animal flower tree forest garden field grass leaf
    house building city street road bridge tower church castle room kitchen table chair window
    car bus train boat plane bicycle truck ship
    beach sea ocean lake river mountain hill sky cloud sun sunset snow rain water island
    food cake bread fruit coffee wine dinner breakfast
    book phone computer camera guitar ball
    old new young beautiful small large big red blue green white black yellow golden dark
    bright colorful vintage modern happy wooden empty famous
    stands sits walks runs looks holds plays smiles poses waits flies swims rides eats
    during after before while
    illustration vector background pattern portrait view photo image design logo icon
    wedding party festival game match concert event holiday christmas summer winter spring autumn
    day night morning evening home world park square market
    """.split()
)


@dataclass(frozen=True)
class DatasetSpec:
    samples: int
    seed: int = 0
    profile: str = "cc3m"
    image_scale: float = 1.0
    content: str = "all"  # "features": embeddings and captions only, no JPEG (the features workload at scale)
    classes: int = 0  # classes clustered in storage order (class_labels); 0: none

    def __post_init__(self) -> None:
        if self.classes and not 2 <= self.classes <= self.samples:
            raise ValueError(f"classes must be 0 (none) or 2 to samples ({self.samples}), got {self.classes}")
        if self.content not in CONTENTS:
            raise ValueError(f"unknown dataset content {self.content!r}; known: {', '.join(CONTENTS)}")
        if self.profile not in PROFILES:
            raise ValueError(f"unknown dataset profile {self.profile!r}; known: {', '.join(sorted(PROFILES))}")
        if self.samples < 0:
            raise ValueError(f"samples must be >= 0, got {self.samples}")
        if not self.image_scale > 0:
            raise ValueError(f"image_scale must be > 0, got {self.image_scale}")

    def to_dict(self) -> dict:
        out = asdict(self)
        if self.content == "all":
            del out["content"]  # as before the field existed
        if not self.classes:
            del out["classes"]
        return out

    def key(self) -> str:
        """Short stable hash of the spec and the generator version."""
        doc = {
            "samples": int(self.samples),
            "seed": int(self.seed),
            "profile": str(self.profile),
            "image_scale": float(self.image_scale),
            "generator_version": GENERATOR_VERSION,
        }
        if self.content != "all":  # absent at the default: the keys of existing datasets do not change
            doc["content"] = self.content
        if self.classes:  # likewise
            doc["classes"] = int(self.classes)
        canon = json.dumps(doc, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canon.encode("utf-8")).hexdigest()[:12]


def _rng(spec: DatasetSpec, index: int) -> np.random.Generator:
    return np.random.default_rng([int(spec.seed), int(index)])


def _draw_sides(rng: np.random.Generator, profile: dict, scale: float) -> tuple[int, int]:
    """(height, width); always the first draws of a sample's stream."""
    lo, hi = profile["long_clip"]
    long_side = float(np.clip(rng.lognormal(np.log(profile["long_median"]), profile["long_sigma"]), lo, hi))
    alo, ahi = profile["aspect_clip"]
    aspect = float(np.clip(rng.lognormal(np.log(profile["aspect_median"]), profile["aspect_sigma"]), alo, ahi))
    if aspect >= 1.0:  # landscape: width is the longer side
        w, h = long_side, long_side / aspect
    else:
        h, w = long_side, long_side * aspect
    h = max(MIN_SIDE, int(round(h * scale)))
    w = max(MIN_SIDE, int(round(w * scale)))
    return h, w


def _render_jpeg(rng: np.random.Generator, h: int, w: int) -> bytes:
    """A photo-like image: smooth colour fields, a few hard-edged shapes, mild noise."""
    gh, gw = (6, 8) if w >= h else (8, 6)
    low = rng.integers(0, 256, size=(gh, gw, 3), dtype=np.uint8)
    img = Image.fromarray(low, "RGB").resize((w, h), Image.BICUBIC)
    draw = ImageDraw.Draw(img)
    n_shapes = int(rng.integers(2, 6))
    shapes = rng.random((n_shapes, 4))
    colours = rng.integers(0, 256, size=(n_shapes, 3))
    kinds = rng.integers(0, 2, size=n_shapes)
    for (a, b, c, d), colour, kind in zip(shapes, colours, kinds):
        x0, x1 = sorted((int(a * w), int(c * w)))
        y0, y1 = sorted((int(b * h), int(d * h)))
        box = (x0, y0, max(x1, x0 + 1), max(y1, y0 + 1))
        fill = tuple(int(v) for v in colour)
        if kind == 0:
            draw.ellipse(box, fill=fill)
        else:
            draw.rectangle(box, fill=fill)
    noise = rng.integers(-6, 7, size=(h, w, 1), dtype=np.int16)
    arr = np.asarray(img, dtype=np.int16) + noise
    np.clip(arr, 0, 255, out=arr)
    out = io.BytesIO()
    Image.fromarray(arr.astype(np.uint8), "RGB").save(out, format="JPEG", quality=JPEG_QUALITY)
    return out.getvalue()


def _caption(rng: np.random.Generator, profile: dict) -> str:
    lo, hi = profile["words_clip"]
    n = int(np.clip(round(rng.lognormal(np.log(profile["words_median"]), profile["words_sigma"])), lo, hi))
    words = rng.integers(0, len(VOCABULARY), size=n)
    return " ".join(VOCABULARY[i] for i in words)


def _unit(rng: np.random.Generator, dim: int) -> np.ndarray:
    v = rng.standard_normal(dim, dtype=np.float32)
    v /= np.float32(np.linalg.norm(v))
    return v


def generate_sample(spec: DatasetSpec, index: int) -> Sample:
    """The sample ``index`` of ``spec``; a pure function of its arguments."""
    if not 0 <= index < spec.samples:
        raise IndexError(f"sample {index} out of range for a dataset of {spec.samples}")
    profile = PROFILES[spec.profile]
    rng = _rng(spec, index)
    h, w = _draw_sides(rng, profile, spec.image_scale)
    jpeg = _render_jpeg(rng, h, w) if spec.content == "all" else b""
    caption = _caption(rng, profile)
    image_emb = _unit(rng, IMAGE_EMB_DIM)
    text_emb = _unit(rng, TEXT_EMB_DIM)
    if spec.classes:
        image_emb = _towards(image_emb, class_centroid(spec, class_of(spec, index)))
    return Sample(index=int(index), jpeg=jpeg, caption=caption, image_emb=image_emb, text_emb=text_emb)


def class_of(spec: DatasetSpec, index: int) -> int:
    """The class of sample ``index``: clusters of consecutive indices, ``index * classes //
    samples``."""
    return int(index) * spec.classes // spec.samples


def class_labels(spec) -> np.ndarray | None:
    """int64[samples]: every sample's class (clusters in storage order), or None for a dataset
    without classes (an imported source has none)."""
    if not isinstance(spec, DatasetSpec) or not spec.classes:
        return None
    return np.arange(spec.samples, dtype=np.int64) * spec.classes // spec.samples


def class_centroid(spec: DatasetSpec, label: int) -> np.ndarray:
    """A class's unit centroid in the image-embedding space, from its own stream (not any
    sample's)."""
    return _unit(np.random.default_rng([int(spec.seed), int(spec.samples) + int(label), 1]), IMAGE_EMB_DIM)


def _towards(v: np.ndarray, centroid: np.ndarray) -> np.ndarray:
    out = v + np.float32(CLASS_SIGNAL) * centroid
    return out / np.float32(np.linalg.norm(out))


def iter_samples(spec: DatasetSpec, start: int = 0, stop: int | None = None) -> Iterator[Sample]:
    stop = spec.samples if stop is None else min(stop, spec.samples)
    for index in range(start, stop):
        yield generate_sample(spec, index)


PARALLEL_MIN_SAMPLES = 2000  # below this, starting generator processes costs more than it saves
CHUNK = 256  # samples per task of a generator process


def _generate_range(spec: DatasetSpec, start: int, stop: int) -> list[Sample]:
    return [generate_sample(spec, i) for i in range(start, stop)]


def _ignore_interrupts() -> None:
    """A generator process leaves Ctrl-C to its parent: killed mid-task by SIGINT it would leave
    the pool's result pipe half-written, and the parent's pool shutdown waiting on it for ever (and
    the pool's semaphores to the resource tracker's "leaked semaphore objects" warning). The parent
    ends the pool."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def iter_samples_parallel(spec: DatasetSpec, processes: int | None = None) -> Iterator[Sample]:
    """The same samples as iter_samples, in order, generated by one process per core. At most two
    chunks per process are in flight, so memory stays bounded whatever the dataset's size."""
    if processes is None:
        processes = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    # Embeddings alone (content "features") are cheaper to draw than to send between processes: measured
    # 5650 samples/s in one process against 5040 with two; JPEG rendering gains 1.7x from two.
    if processes < 2 or spec.samples < PARALLEL_MIN_SAMPLES or spec.content != "all":
        yield from iter_samples(spec)
        return
    import multiprocessing as mp  # spawn: safe even in a process that already runs threads (torchrun)

    starts = range(0, spec.samples, CHUNK)
    with mp.get_context("spawn").Pool(processes, initializer=_ignore_interrupts) as pool:
        pending: deque = deque()
        for start in starts:
            pending.append(pool.apply_async(_generate_range, (spec, start, min(start + CHUNK, spec.samples))))
            if len(pending) >= 2 * processes:
                yield from pending.popleft().get()
        while pending:
            yield from pending.popleft().get()


def image_sides(spec) -> np.ndarray:
    """int32[samples, 2]: (height, width) of every sample's image, without encoding any. For an
    imported source (harness.data.importer.SourceSpec, duck-typed: this module does not import the
    importer) its scan's."""
    if not isinstance(spec, DatasetSpec):
        return spec.image_sides()
    profile = PROFILES[spec.profile]
    out = np.empty((spec.samples, 2), dtype=np.int32)
    for index in range(spec.samples):
        out[index] = _draw_sides(_rng(spec, index), profile, spec.image_scale)
    return out


def head(spec, n: int) -> list[Sample]:
    """The first ``n`` samples (fewer when the dataset is smaller); of an imported source
    (duck-typed, see image_sides) as it streams them."""
    if not isinstance(spec, DatasetSpec):
        return list(itertools.islice(spec.iter_samples(), n))
    return [generate_sample(spec, i) for i in range(min(n, spec.samples))]
