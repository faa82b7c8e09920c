"""The pixels workload's decoders: the same geometry, and simplejpeg within the stated tolerance of PIL."""
from __future__ import annotations

import numpy as np
import pytest

from harness.data.decoders import (
    DECODERS,
    DEFAULT_DECODER,
    check_decoder,
    decode_resize,
    mean_abs_diff,
    resized_shapes,
    target_size,
)
from harness.data.generator import DatasetSpec, generate_sample

# The tolerance simplejpeg must keep against PIL on the generated data (pixel levels, 0-255): the mean over
# images of each image's mean absolute difference, and the worst image's. Measured on 200 cc3m images at
# image_scale 0.5 and 1.0, longest side 96/160/224: mean 0.43-1.31 (1.55 on this test's 60 images at scale
# 0.5, side 96), worst 3.3-5.8. The differences come
# from libjpeg-turbo's finer choice of scale (n/8 against PIL's 1/2, 1/4, 1/8) and rounding, not from a
# different image.
MEAN_TOLERANCE = 2.0
WORST_TOLERANCE = 8.0
SPECS = [DatasetSpec(samples=60, seed=3, profile="cc3m", image_scale=scale) for scale in (0.5, 1.0)]


@pytest.fixture(scope="module", params=SPECS, ids=lambda s: f"scale{s.image_scale}")
def jpegs(request):
    return [generate_sample(request.param, i).jpeg for i in range(request.param.samples)]


def test_default_is_a_known_decoder():
    """simplejpeg where it is installed (here), else pil with a note (tests/test_gpu_image.py runs that)."""
    from harness.data.decoders import fallback_note, installed

    assert DEFAULT_DECODER in DECODERS and installed(DEFAULT_DECODER)
    assert DEFAULT_DECODER == ("simplejpeg" if installed("simplejpeg") else "pil")
    assert (fallback_note() is None) == (DEFAULT_DECODER == "simplejpeg")
    assert check_decoder("simplejpeg") == "simplejpeg"
    with pytest.raises(ValueError, match="decoder must be one of pil, simplejpeg"):
        check_decoder("turbo")
    with pytest.raises(ValueError, match="decoder must be one of"):
        decode_resize(b"", 96, "turbo")


@pytest.mark.parametrize("decoder", DECODERS)
def test_decoders_keep_the_aspect_ratio_and_the_longest_side(jpegs, decoder):
    import io

    from PIL import Image

    for jpeg in jpegs[:20]:
        image = decode_resize(jpeg, 96, decoder)
        w, h = Image.open(io.BytesIO(jpeg)).size
        assert image.dtype == np.uint8 and image.shape == (*target_size(w, h, 96)[::-1], 3)
        assert max(image.shape[:2]) == 96 and image.flags.writeable and image.flags.owndata


@pytest.mark.parametrize("image_size", (96, 160))
def test_simplejpeg_matches_pil_within_tolerance(jpegs, image_size):
    diffs = [mean_abs_diff(decode_resize(j, image_size, "pil"), decode_resize(j, image_size, "simplejpeg"))
             for j in jpegs]
    assert np.mean(diffs) <= MEAN_TOLERANCE and max(diffs) <= WORST_TOLERANCE, (np.mean(diffs), max(diffs))


def test_mean_abs_diff_checks_shapes():
    a = np.zeros((2, 2, 3), np.uint8)
    assert mean_abs_diff(a, a + 3) == 3.0
    with pytest.raises(ValueError):
        mean_abs_diff(a, np.zeros((2, 3, 3), np.uint8))


def test_one_resize_rule_for_one_image_and_for_many():
    rng = np.random.default_rng(0)
    sides = rng.integers(1, 5000, size=(2000, 2))
    for image_size in (32, 96, 224):
        many = resized_shapes(sides, image_size)
        one = [target_size(int(w), int(h), image_size)[::-1] for h, w in sides]
        assert many.tolist() == [list(x) for x in one]
        assert many.max() == image_size and many.min() >= 1


def _encoded(fmt: str, size=(120, 80)) -> bytes:
    import io

    from PIL import Image

    rng = np.random.default_rng(7)
    img = Image.fromarray(rng.integers(0, 256, size=(size[1], size[0], 3), dtype=np.uint8), "RGB")
    out = io.BytesIO()
    img.save(out, format=fmt)
    return out.getvalue()


@pytest.mark.parametrize("fmt", ["WEBP", "PNG"])
def test_non_jpeg_images_decode_and_simplejpeg_hands_them_to_pil_counted(fmt):
    from harness.data import decoders

    data = _encoded(fmt)
    assert not decoders.is_jpeg(data) and decoders.is_jpeg(_encoded("JPEG"))
    before = decoders.pil_fallbacks()
    pil = decode_resize(data, 48, "pil")
    fast = decode_resize(data, 48, "simplejpeg")
    assert pil.shape == fast.shape == (32, 48, 3) and pil.dtype == np.uint8
    assert np.array_equal(pil, fast)  # the same PIL path, not a second decoder
    assert decoders.pil_fallbacks() == before + 1
    decode_resize(_encoded("JPEG"), 48, "simplejpeg")
    assert decoders.pil_fallbacks() == before + 1  # a JPEG is simplejpeg's own


def test_decoded_pixels_counts_a_non_jpeg_whole():
    from harness.data.decoders import decoded_pixels

    sides = np.array([[400, 600], [400, 600]])
    jpeg_only = decoded_pixels(sides, 96, "pil")
    mixed = decoded_pixels(sides, 96, "pil", jpeg=np.array([True, False]))
    assert mixed[0] == jpeg_only[0] < mixed[1] == 400 * 600
