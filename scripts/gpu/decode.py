"""torchvision.io.decode_jpeg on the GPU (nvJPEG) against the CPU decode (libjpeg-turbo) of the same bytes.

JPEGs made here with PIL from smooth synthetic images: baseline 4:2:0, progressive, grayscale (decoded to RGB,
as the harness asks), odd sizes (4:2:0 with odd width and height, and a tiny 17x9), 4:4:4. Each is decoded on
the GPU alone (so a case nvJPEG refuses is named), then all in one batched call (a list, as
harness/train/devprep.py calls it), and on the CPU. Holds when every image has the same shape both ways and
its mean absolute difference is below 2 levels (torchvision's own test bound) and its largest at most MAX_ABS
levels (the two decoders' IDCT and chroma upsampling differ by a few), one by one and batched.
`--cpu-only` makes and decodes the JPEGs on the CPU only (what runs without a GPU); otherwise it is skipped
without CUDA (exit 77)."""
from __future__ import annotations

import io
import sys

import gpucommon
import numpy as np

MEAN_ABS, MAX_ABS = 2.0, 24
# name -> (width, height, PIL mode, save options)
CASES = {
    "baseline": (640, 480, "RGB", {"quality": 90}),
    "progressive": (640, 480, "RGB", {"quality": 90, "progressive": True}),
    "grayscale": (500, 375, "L", {"quality": 90}),
    "odd-size": (333, 197, "RGB", {"quality": 90}),
    "tiny-odd": (17, 9, "RGB", {"quality": 90}),
    "4:4:4": (401, 299, "RGB", {"quality": 95, "subsampling": 0}),
}


def smooth_image(width: int, height: int, mode: str, seed: int = 0):
    """Gradients and low-frequency waves (what a photo's content is mostly made of): decoders agree on it
    up to rounding, so a wrong decode stands out."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    channels = []
    for c in range(3):
        fx, fy, phase = rng.uniform(0.5, 3.0), rng.uniform(0.5, 3.0), rng.uniform(0, 6.28)
        wave = np.sin(2 * np.pi * (fx * x / width + fy * y / height) + phase)
        channels.append(127.5 + 60 * wave + 50 * (x / max(width - 1, 1) - 0.5) * (1 if c % 2 else -1))
    rgb = np.clip(np.stack(channels, -1), 0, 255).astype(np.uint8)
    img = Image.fromarray(rgb, "RGB")
    return img.convert("L") if mode == "L" else img


def jpegs() -> dict[str, bytes]:
    out = {}
    for i, (name, (w, h, mode, options)) in enumerate(CASES.items()):
        buf = io.BytesIO()
        smooth_image(w, h, mode, seed=i).save(buf, format="JPEG", **options)
        out[name] = buf.getvalue()
    return out


def compare(cpu: dict, gpu: dict) -> tuple[bool, dict]:
    figures, ok = {}, True
    for name, ref in cpu.items():
        got = gpu[name]
        if tuple(got.shape) != tuple(ref.shape):
            figures[name] = {"cpu_shape": list(ref.shape), "gpu_shape": list(got.shape)}
            ok = False
            continue
        diff = (ref.float() - got.float()).abs()
        mean, peak = float(diff.mean()), int(diff.max())
        good = mean < MEAN_ABS and peak <= MAX_ABS
        ok &= good
        figures[name] = {"shape": list(ref.shape), "mean_abs": round(mean, 3), "max_abs": peak, "ok": good}
    return ok, figures


def main(argv: list[str] | None = None) -> int:
    p = gpucommon.parser(__doc__)
    p.add_argument("--cpu-only", action="store_true", help="make and decode the JPEGs on the CPU only")
    args = p.parse_args(argv)
    if not args.cpu_only:
        gpucommon.cuda_or_skip("decode")
    import torch
    from torchvision.io import ImageReadMode, decode_jpeg

    data = {name: torch.frombuffer(bytearray(b), dtype=torch.uint8) for name, b in jpegs().items()}
    cpu = {name: decode_jpeg(t, mode=ImageReadMode.RGB) for name, t in data.items()}
    if args.cpu_only:
        return gpucommon.finish("decode", True, {n: list(t.shape) for n, t in cpu.items()}, args.out,
                                "CPU only: the JPEGs were made and decoded, nothing compared")
    single, errors = {}, {}
    for name, t in data.items():  # one by one first: a case nvJPEG refuses is named, not lost in the batch
        try:
            single[name] = decode_jpeg(t, mode=ImageReadMode.RGB, device="cuda").cpu()
        except RuntimeError as err:
            errors[name] = str(err).splitlines()[0][:200]
    ok, figures = compare({n: cpu[n] for n in single}, single)
    figures["errors"] = errors
    bad = sorted([n for n, f in figures.items() if n != "errors" and not f.get("ok")] + list(errors))
    names = list(data)
    try:  # the batched call, as the harness makes it
        batched = decode_jpeg([data[n] for n in names], mode=ImageReadMode.RGB, device="cuda")
        same, _ = compare(cpu, {n: t.cpu() for n, t in zip(names, batched)})
    except RuntimeError as err:
        same, errors["(batched)"] = False, str(err).splitlines()[0][:200]
    figures["batched_ok"] = same
    worst = max((f.get("max_abs", 0) for f in figures.values() if isinstance(f, dict) and "ok" in f), default=0)
    why = (f"{len(names) - len(bad)}/{len(names)} JPEGs match the CPU decode (mean abs < {MEAN_ABS}, max abs "
           f"<= {MAX_ABS}; worst max {worst}); the batched call {'matches' if same else 'FAILS'}"
           + (f"; differ or refused: {', '.join(bad)}" if bad else ""))
    return gpucommon.finish("decode", ok and not errors and same, figures, args.out, why)


if __name__ == "__main__":
    sys.exit(main())
