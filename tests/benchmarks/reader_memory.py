"""A reader's peak memory (PSS) against the dataset's size, per storage, features fields.

    python tests/benchmarks/reader_memory.py --sizes 10000,100000 --root /tmp/dlbench-mem

For each size and storage, a features-only dataset is written once under ``--root`` (the embeddings of sample i
filled with i mod 251, an empty caption and a stand-in JPEG: the content does not matter to the reader's memory,
and a generated cc3m dataset would take ~1.6 ms a sample to make; h5py cannot write a batch of vlen rows that
all have one length, so the stand-in JPEGs are 1-5 bytes). Then, in a fresh process per (size, storage), a
reader is opened on the features fields and reads ``--batches`` random batches of ``--batch-size``; the
process's PSS and RSS (/proc/self/smaps_rollup) are sampled after each batch. The table gives the peak PSS over
the batches (while a batch is held) minus the PSS before the reader was opened (imports done), split into
anonymous memory (the reader's own: buffers, indexes it loaded) and mapped file pages (page cache the process
maps: the rows and offsets it touched; shared and reclaimable). Memory that grows with N would show as a growing
column; the pages a batch maps (its rows, and the pages of the offsets it touches) do not grow with N.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from strategies import registry  # noqa: E402
from strategies.sample import IMAGE_EMB_DIM, TEXT_EMB_DIM, Sample  # noqa: E402

STORAGES = {"raw": ("raw", {}), "mmap": ("mmap", {}), "hdf5-contiguous": ("hdf5", {"layout": "contiguous"}),
            "hdf5-chunked16": ("hdf5", {"layout": "chunked"})}


def samples(count: int):
    for i in range(count):
        v = np.float32(i % 251)
        yield Sample(i, b"j" * (1 + i % 5), "", np.full(IMAGE_EMB_DIM, v, np.float32),
                     np.full(TEXT_EMB_DIM, v, np.float32))


def ensure(root: Path, label: str, count: int) -> Path:
    name, params = STORAGES[label]
    path = root / f"{count}-{label}"
    if (path / "meta.json").exists():
        return path
    tmp = root / f"{count}-{label}.tmp"
    if tmp.exists():
        import shutil

        shutil.rmtree(tmp)
    start = time.perf_counter()
    registry.create("storage", name, **params).write(samples(count), tmp, count)
    os.rename(tmp, path)
    print(f"wrote {label} x {count} in {time.perf_counter() - start:.0f} s", file=sys.stderr)
    return path


def rollup() -> dict[str, int]:
    """Pss, Pss_Anon (the process's own memory), Pss_File (mapped file pages: page cache) and Rss, bytes."""
    out = {}
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            key = line.split(":")[0]
            if key in ("Pss", "Pss_Anon", "Pss_File", "Rss"):
                out[key] = int(line.split()[1]) * 1024
    return out


def measure(path: str, label: str, batches: int, batch_size: int) -> dict:
    """In this (fresh) process: open the reader, read the batches, peak PSS/RSS over the baseline."""
    name, params = STORAGES[label]
    storage = registry.create("storage", name, **params)
    base = rollup()
    reader = storage.open(Path(path), fields=("image_emb", "text_emb"))
    rng = np.random.default_rng(0)
    n = len(reader)
    peak = dict.fromkeys(base, 0)
    for _ in range(batches):
        got = reader.read_batch(rng.choice(n, size=min(batch_size, n), replace=False))
        assert len(got) == min(batch_size, n)
        now = rollup()  # while the batch is held
        del got
        peak = {k: max(v, now[k]) for k, v in peak.items()}
    reader.close()
    return {"storage": label, "samples": n, "batches": batches, "batch_size": batch_size,
            "base_pss_mb": base["Pss"] / 1e6, **{f"{k.lower()}_mb": (peak[k] - base[k]) / 1e6 for k in base}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--root", default="/tmp/dlbench-mem")
    ap.add_argument("--storages", default=",".join(STORAGES))
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--measure", nargs=2, metavar=("PATH", "STORAGE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    registry.load_builtins()
    if args.measure:
        print(json.dumps(measure(args.measure[0], args.measure[1], args.batches, args.batch_size)))
        return
    root = Path(args.root)
    root.mkdir(parents=True, exist_ok=True)
    rows = []
    for count in (int(s) for s in args.sizes.split(",")):
        for label in args.storages.split(","):
            path = ensure(root, label, count)
            out = subprocess.run([sys.executable, __file__, "--measure", str(path), label, "--batches",
                                  str(args.batches), "--batch-size", str(args.batch_size)],
                                 check=True, capture_output=True, text=True).stdout
            rows.append(json.loads(out.strip().splitlines()[-1]))
            print(json.dumps(rows[-1]), file=sys.stderr)
    sizes = sorted({r["samples"] for r in rows})
    print(f"Peak over {args.batches} batches of {args.batch_size} minus before opening, MB: "
          "PSS (anonymous + mapped file pages)")
    print("| storage | " + " | ".join(f"{n:,} samples" for n in sizes) + " |")
    print("| --- |" + " --: |" * len(sizes))
    for label in dict.fromkeys(r["storage"] for r in rows):
        cells = {r["samples"]: r for r in rows if r["storage"] == label}
        print(f"| {label} | " + " | ".join(
            f"{cells[n]['pss_mb']:.1f} ({cells[n]['pss_anon_mb']:.1f} + {cells[n]['pss_file_mb']:.1f})"
            if n in cells else "-" for n in sizes) + " |")


if __name__ == "__main__":
    main()
