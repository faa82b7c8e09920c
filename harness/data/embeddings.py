"""The embeddings of an imported sample, for the features workload, when the source has none (see
harness.data.importer for their definition), and the small decode that checks every source image
(JPEG, webp or PNG)."""
from __future__ import annotations

import functools
import hashlib
import io
import re
import warnings

import numpy as np
from PIL import Image

from harness.errors import UsageError
from strategies.sample import IMAGE_EMB_DIM, TEXT_EMB_DIM

PROJECTION_SEED = 20240612
PROJECTION_SIDE = 32


@functools.lru_cache(maxsize=1)
def _projection() -> np.ndarray:
    rng = np.random.default_rng(PROJECTION_SEED)
    return rng.standard_normal((PROJECTION_SIDE * PROJECTION_SIDE * 3, IMAGE_EMB_DIM), dtype=np.float32)


def _unit(v: np.ndarray) -> np.ndarray:
    norm = float(np.linalg.norm(v))
    return (v / np.float32(norm)).astype(np.float32) if norm > 0 else v.astype(np.float32)


def image_embedding(small_rgb: np.ndarray) -> np.ndarray:
    """float32[2048] from uint8[32, 32, 3] (see the module docstring)."""
    x = small_rgb.astype(np.float32).reshape(-1) / np.float32(255.0) - np.float32(0.5)
    return _unit(x @ _projection())


@functools.lru_cache(maxsize=8192)
def _token_vector(token: str) -> np.ndarray:
    seed = int.from_bytes(hashlib.blake2b(token.encode("utf-8"), digest_size=8).digest(), "little")
    return np.random.default_rng(seed).standard_normal(TEXT_EMB_DIM, dtype=np.float32)


def text_embedding(caption: str) -> np.ndarray:
    """float32[768] from a caption (see the module docstring)."""
    tokens = caption.lower().split()
    if not tokens:
        return _unit(np.random.default_rng(PROJECTION_SEED + 1).standard_normal(TEXT_EMB_DIM, dtype=np.float32))
    return _unit(np.sum([_token_vector(t) for t in tokens], axis=0, dtype=np.float32))


SUPPORTED_FORMATS = ("JPEG", "WEBP", "PNG")  # what img2dataset's --encode_format writes
MAX_PIXELS = 40_000_000  # an image above this (e.g. 11000 x 11000) is counted as unusable, never decoded whole


def decode_checked(data: bytes) -> tuple[np.ndarray, tuple[int, int], str]:
    """(uint8[32, 32, 3], (height, width) of the source image, its format: "JPEG", "WEBP" or
    "PNG"), or ValueError saying why it is not usable (another format, truncated, garbage). JPEGs
    are decoded in libjpeg's reduced-size draft mode; webp and PNG have none and are decoded whole.
    An image of more than MAX_PIXELS is not decoded: unusable (PIL's own, larger bomb limit would
    warn, then decode it whole)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            img = Image.open(io.BytesIO(data))
        if img.format not in SUPPORTED_FORMATS:
            raise ValueError(f"not a JPEG, webp or PNG ({img.format})")
        fmt = img.format
        width, height = img.size
        if width * height > MAX_PIXELS:
            raise ValueError(f"{width} x {height} pixels, above the harness's limit of {MAX_PIXELS / 1e6:g} "
                             f"megapixels per image (embeddings.MAX_PIXELS)")
        if fmt == "JPEG":
            img.draft("RGB", (PROJECTION_SIDE, PROJECTION_SIDE))  # libjpeg's reduced-size decode
        small = img.convert("RGB").resize((PROJECTION_SIDE, PROJECTION_SIDE), Image.BILINEAR)
        return np.asarray(small, dtype=np.uint8), (height, width), fmt
    except ValueError:
        raise
    except (OSError, SyntaxError, Image.DecompressionBombError) as err:  # PIL's ways of saying "corrupt"
        text = re.sub(r"<[^>]* at 0x[0-9a-f]+>", "the bytes", " ".join(str(err).split()))  # no addresses
        raise ValueError(text or type(err).__name__) from None


def decode_small(data: bytes) -> tuple[np.ndarray, tuple[int, int]]:
    """(uint8[32, 32, 3], (height, width) of the source image): decode_checked without the
    format."""
    small, sides, _ = decode_checked(data)
    return small, sides


def checked_embedding(value, dim: int, name: str, where: str) -> np.ndarray:
    arr = np.asarray(value, dtype=np.float32).reshape(-1)
    if arr.size != dim:
        raise UsageError(f"{where}: {name} has {arr.size} values, the harness's models take {dim}; remove the "
                         f"{name} from the source to have them computed (a fixed projection)")
    return arr
