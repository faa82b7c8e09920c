"""JPEG decode + resize of the pixels workload, with a choice of decoder.

``decode_resize(jpeg, image_size, decoder)`` returns uint8 HWC pixels, longest side ``image_size``,
aspect ratio kept (the rounding ``pipeline`` and the balanced sampler's cost assume). Both decoders
let libjpeg decode at a reduced scale, then resize bilinearly with PIL:

* ``"pil"``: PIL's draft mode, DCT scaling by 1/2, 1/4 or 1/8 (the largest that keeps the image at
  least as large as the target);
* ``"simplejpeg"``: the libjpeg-turbo that simplejpeg bundles, asked for the smallest of
  libjpeg-turbo's scales (n/8) that is at least as large as the target, so the resize has less to
  do.

Their outputs differ by a little rounding and by the scale picked; ``mean_abs_diff`` measures it.
On the generated cc3m data (200 images at image_scale 0.5 and 1.0; longest side 96, 160, 224) the
mean absolute difference is 0.43-1.31 pixel levels of 255 on average over the images and 3.3-5.8
for the worst image; tests/test_decoders.py holds the tolerance (2 on average, 8 for any image).
simplejpeg is the faster (7-30% less time an image, by source size), so it is the pixels workload's
default where it is installed; where it is not (the GPU image has no simplejpeg), a scenario that
names no decoder gets ``"pil"`` (``DEFAULT_DECODER``, resolved once at import), and the run says so
in one line (``fallback_note``). The decoder a run used is the scenario's, so the comparable
settings (env.json) record what really ran. A scenario that names ``"simplejpeg"`` where it is not
installed is refused at load time (exit 2).

Non-JPEG images (webp and PNG sources, harness.data.importer): libjpeg has nothing to do with them.
``"pil"`` decodes them whole (no draft mode for these formats) and resizes; ``"simplejpeg"``
decides per image by its first bytes (a JPEG starts ``FF D8 FF``) and hands every other image to
the ``"pil"`` path, counted in ``pil_fallbacks()`` (this process's count). The import's ``formats``
says how many images of a source are not JPEGs, so how many the simplejpeg decoder hands to PIL in
each epoch. ``decoded_pixels`` counts a non-JPEG image's whole area when told which images are
JPEGs.
"""
from __future__ import annotations

import importlib
import io

import numpy as np
from PIL import Image

DECODERS = ("pil", "simplejpeg")
# The pixels workload's preferred default ([training] decoder): the faster one, because its output stays
# within the tolerance of PIL's that tests/test_decoders.py checks (see the module docstring).
PREFERRED_DECODER = "simplejpeg"


def installed(decoder: str) -> bool:
    """Whether the package `decoder` needs is importable here (PIL always is: the harness requires
    it)."""
    if decoder == "pil":
        return True
    try:
        importlib.import_module(decoder)
    except ImportError:
        return False
    return True


# The default a scenario without [training] decoder gets: the preferred one where it is installed, else PIL.
DEFAULT_DECODER = PREFERRED_DECODER if installed(PREFERRED_DECODER) else "pil"


def fallback_note() -> str | None:
    """One line when the default fell back to PIL because simplejpeg is not installed; else
    None."""
    if DEFAULT_DECODER == PREFERRED_DECODER:
        return None
    return (f"note: {PREFERRED_DECODER} is not installed, so the decoder is pil (the default prefers "
            f"{PREFERRED_DECODER}: pip install {PREFERRED_DECODER}; the run's settings in env.json say pil)")
JPEG_MAGIC = b"\xff\xd8\xff"
_fallbacks = 0  # non-JPEG images the simplejpeg decoder handed to PIL in this process


def is_jpeg(data: bytes) -> bool:
    return bytes(data[:3]) == JPEG_MAGIC


def pil_fallbacks() -> int:
    """How many non-JPEG images the simplejpeg decoder has handed to PIL in this process."""
    return _fallbacks


def resized_shapes(sides: np.ndarray, image_size: int) -> np.ndarray:
    """int64[N, 2] (height, width) of images of `sides` (N x (height, width)) after the pixels
    workload's resize: longest side image_size, aspect ratio kept, rounded half to even, at least
    1. The one rule: the decoders, the pipeline's cost model and decoded_pixels all use it."""
    sides = np.asarray(sides, dtype=np.float64).reshape(-1, 2)
    scale = image_size / sides.max(axis=1)
    return np.maximum(1, np.round(sides * scale[:, None])).astype(np.int64)


def target_size(width: int, height: int, image_size: int) -> tuple[int, int]:
    """(width, height) of one image after the resize (resized_shapes)."""
    (h, w), = resized_shapes([(height, width)], image_size)
    return int(w), int(h)


def _pil(jpeg: bytes, image_size: int) -> np.ndarray:
    img = Image.open(io.BytesIO(jpeg))
    size = target_size(*img.size, image_size)
    img.draft("RGB", size)  # let libjpeg decode at a reduced scale when it can (JPEG only; else a no-op)
    img = img.convert("RGB").resize(size, Image.BILINEAR)
    return np.array(img)  # an owned, writable copy


def _simplejpeg(jpeg: bytes, image_size: int) -> np.ndarray:
    import simplejpeg

    if not is_jpeg(jpeg):  # webp, PNG: simplejpeg reads JPEGs only
        global _fallbacks
        _fallbacks += 1
        return _pil(jpeg, image_size)
    height, width, _, _ = simplejpeg.decode_jpeg_header(jpeg)
    tw, th = target_size(width, height, image_size)
    pixels = simplejpeg.decode_jpeg(jpeg, colorspace="RGB", min_height=th, min_width=tw)
    if pixels.shape[:2] == (th, tw):
        return pixels  # already an owned, writable array
    return np.array(Image.fromarray(pixels).resize((tw, th), Image.BILINEAR))


_IMPL = {"pil": _pil, "simplejpeg": _simplejpeg}


def check_decoder(decoder: str) -> str:
    """``decoder`` if it is known and importable; ValueError naming the choices or the missing
    package."""
    if decoder not in _IMPL:
        raise ValueError(f"decoder must be one of {', '.join(DECODERS)}; got {decoder!r}")
    if not installed(decoder):
        raise ValueError(f"decoder {decoder!r} needs the {decoder} package, which is not installed: "
                         f"pip install {decoder}, or set decoder = \"pil\"")
    return decoder


def decode_resize(jpeg: bytes, image_size: int, decoder: str = "pil") -> np.ndarray:
    """Image bytes (JPEG; webp or PNG too, see the module docstring) -> uint8 HWC, longest side
    image_size, aspect ratio kept (PIL unless ``decoder`` says)."""
    try:
        impl = _IMPL[decoder]
    except KeyError:
        check_decoder(decoder)
        raise
    return impl(jpeg, image_size)


def mean_abs_diff(a: np.ndarray, b: np.ndarray) -> float:
    """Mean absolute difference of two uint8 images of one shape, in pixel levels (0-255)."""
    if a.shape != b.shape:
        raise ValueError(f"shapes differ: {a.shape} vs {b.shape}")
    return float(np.abs(a.astype(np.int16) - b.astype(np.int16)).mean())


def decoded_pixels(sides: np.ndarray, image_size: int, decoder: str = "pil",
                   jpeg: np.ndarray | None = None) -> np.ndarray:
    """Pixels libjpeg decodes for each (height, width) in `sides` under decode_resize's
    reduced-scale decode.

    PIL's draft picks the largest scale 1/s, s in (8, 4, 2, 1), with s <= min(w // target_w, h //
    target_h); simplejpeg picks the smallest of libjpeg-turbo's scales n/8, n = 1..8, that keeps
    both sides at least the target's. Either decodes ceil(w * scale) x ceil(h * scale) pixels. This
    is the decode work of a sample: on the generated cc3m data (PIL) it predicts decode+resize time
    better (r = 0.81) than the stored JPEG bytes (0.78), the source pixels (0.76) or the resized
    area (0.47). ``jpeg`` (bool[N], None: all are JPEGs) marks the JPEGs: any other image is
    decoded whole, h x w pixels, by either decoder.
    """
    sides = np.asarray(sides, dtype=np.int64)
    if jpeg is not None:
        jpeg = np.asarray(jpeg, dtype=bool)
        return np.where(jpeg, decoded_pixels(sides, image_size, decoder), sides[:, 0] * sides[:, 1])
    h, w = sides[:, 0], sides[:, 1]
    th, tw = resized_shapes(sides, image_size).T
    if decoder == "simplejpeg":
        n = np.full(len(sides), 8, dtype=np.int64)
        for k in range(7, 0, -1):  # the smallest n/8 whose decode still covers the target
            fits = (-(-w * k // 8) >= tw) & (-(-h * k // 8) >= th)
            n = np.where(fits, k, n)
        return (-(-h * n // 8)) * (-(-w * n // 8))
    ratio = np.minimum(w // tw, h // th)
    s = np.select([ratio >= 8, ratio >= 4, ratio >= 2], [8, 4, 2], default=1)
    return (-(-h // s)) * (-(-w // s))
