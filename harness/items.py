"""The Dataset between a reader and the DataLoader, and the collate functions of the two workloads.

``SampleDataset.__getitems__`` hands the whole batch's indices to ``reader.read_batch`` in one call.
pixels: decode the JPEG, resize keeping the aspect ratio (longest side = image_size), pad-collate to the
batch's largest image. features: the precomputed image and text embeddings.
"""
from __future__ import annotations

import io
import os
import zlib
from typing import Sequence

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset

from strategies.sample import Sample

VOCAB_SIZE = 4096
MAX_TOKENS = 48
FIELDS_FOR = {"pixels": ("jpeg", "caption"), "features": ("image_emb", "text_emb")}


def tokenize(caption: str) -> list[int]:
    """Words hashed into a fixed vocabulary (stable across processes, unlike hash())."""
    return [zlib.crc32(w.encode()) % (VOCAB_SIZE - 1) + 1 for w in caption.split()[:MAX_TOKENS]]


def decode_resize(jpeg: bytes, image_size: int) -> np.ndarray:
    """JPEG bytes -> uint8 HWC, longest side image_size, aspect ratio kept."""
    img = Image.open(io.BytesIO(jpeg))
    w, h = img.size
    scale = image_size / max(w, h)
    size = (max(1, round(w * scale)), max(1, round(h * scale)))
    img.draft("RGB", size)  # let libjpeg decode at a reduced scale when it can
    img = img.convert("RGB").resize(size, Image.BILINEAR)
    return np.array(img)  # an owned, writable copy


def sample_nbytes(sample: Sample) -> int:
    return sample.nbytes


def item_nbytes(item: dict) -> int:
    """Bytes a decoded item holds (what a decoded-level cache keeps)."""
    n = 0
    for value in item.values():
        if isinstance(value, torch.Tensor):
            n += value.numel() * value.element_size()
        elif isinstance(value, list):
            n += 8 * len(value)
        else:
            n += 8
    return n


class ItemBatch(list):
    """The items of one batch, carrying a snapshot of the cache statistics of the process that read it."""

    cache_stats: dict | None = None


class SampleDataset(Dataset):
    """reader -> optional cache (of stored samples or of decoded items) -> prepared items."""

    def __init__(self, reader, workload: str, image_size: int, cache=None):
        self.reader = reader
        self.workload = workload
        self.image_size = image_size
        self.scope = None if cache is None else cache.scope
        self.level = None if cache is None or cache.scope == "none" else cache.level
        if self.level == "stored":
            self._cached = cache.wrap(reader.read_batch, sample_nbytes)
        elif self.level == "decoded":
            self._cached = cache.wrap(self._read_prepared, item_nbytes)
        else:
            self._cached = None

    def __len__(self) -> int:
        return len(self.reader)

    def shared_stats(self) -> dict | None:
        """Statistics of a rank-wide shared cache, read from the rank process (one round trip)."""
        if self._cached is None or self.scope != "shared":
            return None
        return dict(self._cached.stats(), key="shared")

    def __getitem__(self, index: int):
        return self.__getitems__([index])[0]

    def _read_prepared(self, indices: list[int]) -> list[dict]:
        return [self._prepare(s) for s in self.reader.read_batch(indices)]

    def __getitems__(self, indices: Sequence[int]) -> ItemBatch:
        indices = list(indices)
        if self.level is None:
            batch = ItemBatch(self._read_prepared(indices))
        elif self.level == "stored":
            batch = ItemBatch(self._prepare(s) for s in self._cached(indices))
        else:
            batch = ItemBatch(self._cached(indices))
        if self._cached is not None and self.scope == "worker":  # local and cheap; a shared cache is asked
            stats = dict(self._cached.stats())                    # by the rank itself (shared_stats)
            stats["key"] = f"pid{os.getpid()}"
            batch.cache_stats = stats
        return batch

    def _prepare(self, s: Sample) -> dict:
        item = {"index": s.index, "nbytes": s.nbytes}
        if self.workload == "pixels":
            item["image"] = torch.from_numpy(decode_resize(s.jpeg, self.image_size))
            item["tokens"] = tokenize(s.caption)
        else:
            item["image_emb"] = torch.from_numpy(s.image_emb)
            item["text_emb"] = torch.from_numpy(s.text_emb)
        return item


def collate(items: list[dict]) -> dict:
    """Stack a batch; pixels are zero-padded to the largest height and width of the batch."""
    batch = {
        "index": torch.tensor([it["index"] for it in items], dtype=torch.int64),
        "nbytes": sum(it["nbytes"] for it in items),
        "cache_stats": getattr(items, "cache_stats", None),
    }
    if "image" in items[0]:
        h = max(it["image"].shape[0] for it in items)
        w = max(it["image"].shape[1] for it in items)
        images = torch.zeros((len(items), 3, h, w), dtype=torch.uint8)
        tokens = torch.zeros((len(items), MAX_TOKENS), dtype=torch.int64)
        real_pixels = 0
        for i, it in enumerate(items):
            ih, iw, _ = it["image"].shape
            images[i, :, :ih, :iw] = it["image"].permute(2, 0, 1)
            real_pixels += ih * iw
            tokens[i, : len(it["tokens"])] = torch.tensor(it["tokens"], dtype=torch.int64)
        batch.update(images=images, tokens=tokens, padded_pixels=len(items) * h * w,
                     real_pixels=real_pixels)
    else:
        batch.update(image_emb=torch.stack([it["image_emb"] for it in items]),
                     text_emb=torch.stack([it["text_emb"] for it in items]),
                     padded_pixels=0, real_pixels=0)
    return batch
