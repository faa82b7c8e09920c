"""The Dataset between a reader and the DataLoader, and the collate functions of the two workloads.

``SampleDataset.__getitems__`` hands the whole batch's indices to ``reader.read_batch`` in one
call. pixels: decode the JPEG, resize keeping the aspect ratio (longest side = image_size),
pad-collate to the batch's largest image. features: the precomputed image and text embeddings.

The collate writes each image once, into its slot of the batch: the batch's images are stored
channels-last (N, H, W, 3 in memory, a [N, 3, H, W] tensor with channels_last strides), so a
decoded HWC image is copied row by row, or mirrored on the way where its flip was drawn (a flip
drawn in __getitems__, after the cache). In a DataLoader worker the batch is written in a shared
arena that the queue hands over without copying (harness.train.handover).

Where pixels are prepared is the preprocess strategy's choice: "host" (here, in the loader: decode,
resize, a random horizontal flip, and with normalise=True float32 normalisation in the collate), or
"device" (here only the JPEG bytes are handed over, as uint8 tensors; harness.train.devprep decodes
them on the accelerator).
"""
from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Sequence

import numpy as np
import torch
from torch.utils.data import Dataset, get_worker_info

from harness.data.decoders import decode_resize
from harness.data.fields import MAX_TOKENS, normalise, tokenize
from harness.train import stagetimer
from harness.train.handover import BatchAlloc, hand_over
from harness.train.stagetimer import STAGE_KEY, timed_inside, timed_read
from strategies.sample import Sample


def sample_nbytes(sample: Sample) -> int:
    return sample.nbytes


def item_nbytes(item: dict) -> int:
    """Bytes a decoded item holds (what a decoded-level cache keeps)."""
    n = 0
    for value in item.values():
        if isinstance(value, torch.Tensor):
            n += value.numel() * value.element_size()
        elif isinstance(value, np.ndarray):
            n += value.nbytes
        elif isinstance(value, list):
            n += 8 * len(value)
        else:
            n += 8
    return n


class ItemBatch(list):
    """The items of one batch, carrying a snapshot of the cache statistics of the process that read
    it, the account of its stages so far (harness.train.stagetimer) and which images the collate
    mirrors (flips)."""

    cache_stats: dict | None = None
    stage_s: dict | None = None
    flips: list[bool] | None = None


class LockedFetch:
    """A fetch (and its stats) called under one lock."""

    def __init__(self, fetch):
        self.fetch, self.lock = fetch, threading.Lock()

    def __call__(self, indices):
        with self.lock:
            return self.fetch(indices)

    def stats(self):
        with self.lock:
            return self.fetch.stats()


class SampleDataset(Dataset):
    """reader -> cache -> prepared items.

    The cache strategy wraps the read: at level "decoded" it keeps prepared items (the wrapped call
    reads and prepares), at any other level what storage returned (prepared after the cache). A
    worker-scope cache's statistics travel with each batch; a shared cache is asked by the rank
    (shared_stats). Without a cache strategy (cache=None) every read goes to storage.
    """

    def __init__(self, reader, workload: str, image_size: int, cache=None, preprocess=None,
                 decoder: str = "pil"):
        self.reader = reader
        self.workload = workload
        self.image_size = image_size
        self.decoder = decoder
        self.on_device = preprocess is not None and preprocess.where == "device"
        self.flip = preprocess is not None and preprocess.flip and not self.on_device
        self.scope = None if cache is None else cache.scope
        self.decoded = cache is not None and cache.level == "decoded"
        read = timed_read(reader.read_batch)  # the read stage, timed in whichever process runs it
        # a cache strategy's call is timed as `cache`, less its calls to what it wraps (timed_inside times them)
        if cache is None:
            self._fetch = read
        elif self.decoded:
            self._read = read
            self._fetch = cache.wrap(timed_inside(self._read_prepared), item_nbytes)
        else:
            self._fetch = cache.wrap(timed_inside(read), sample_nbytes)

    def __len__(self) -> int:
        return len(self.reader)

    def for_threads(self) -> SampleDataset:
        """Make the cached fetch safe for a thread pool (loader = threads): a cache strategy's
        store and a shared cache's connection are per-process objects, so their calls are
        serialised by one lock."""
        if self.scope is not None:
            self._fetch = LockedFetch(self._fetch)
        return self

    def shared_stats(self) -> dict | None:
        """Statistics of a rank-wide shared cache, read from the rank process (one round trip)."""
        if self.scope != "shared":
            return None
        stats = self._fetch.stats()
        return None if stats is None else dict(stats, key="shared")

    def __getitem__(self, index: int):
        return self.__getitems__([index])[0]

    def _read_prepared(self, indices: list[int]) -> list[dict]:
        return self._prepare_all(self._read(indices))

    def _prepare_all(self, samples) -> list[dict]:
        """Items from samples; each one's decode and transform calls timed where they run
        (_prepare)."""
        spent = [0.0, 0.0]  # decode, transform
        items = [self._prepare(s, spent) for s in samples]
        stagetimer.add("decode", spent[0])
        stagetimer.add("transform", spent[1])
        return items

    def __getitems__(self, indices: Sequence[int]) -> ItemBatch:
        account = stagetimer.begin()
        if self.scope is None:
            fetched = self._fetch(list(indices))
        else:  # the cache strategy's own work (harness.train.stagetimer.timed_cache)
            fetched = stagetimer.timed_cache(self._fetch, list(indices), account)
        batch = ItemBatch(fetched if self.decoded else self._prepare_all(fetched))
        if self.flip and self.workload == "pixels":  # after the cache: a decoded cache keeps unflipped items
            start = time.thread_time()  # drawn here, done by the collate's copy into the batch (no copy here)
            batch.flips = [random.random() < 0.5 for _ in batch]
            stagetimer.add("transform", time.thread_time() - start)
        batch.stage_s = account
        if self.scope == "worker":  # local and cheap; a shared cache is asked by the rank (shared_stats)
            stats = self._fetch.stats()
            if stats is not None:
                batch.cache_stats = dict(stats, key=f"pid{os.getpid()}")
        return batch

    def _prepare(self, s: Sample, spent: list[float]) -> dict:
        """One item; the seconds of its decode and of its transform calls added to spent[0] and
        spent[1]."""
        item = {"index": s.index, "nbytes": s.nbytes}
        if self.workload == "pixels" and self.on_device:
            start = time.thread_time()
            item["jpeg"] = torch.frombuffer(bytearray(s.jpeg), dtype=torch.uint8)
            item["tokens"] = tokenize(s.caption)
            spent[1] += time.thread_time() - start
        elif self.workload == "pixels":
            start = time.thread_time()
            pixels = decode_resize(s.jpeg, self.image_size, self.decoder)
            decoded = time.thread_time()
            item["image"] = pixels  # HWC uint8, as decoded: the collate writes it into the batch tensor
            item["tokens"] = tokenize(s.caption)
            spent[0] += decoded - start
            spent[1] += time.thread_time() - decoded
        else:
            start = time.thread_time()
            item["image_emb"], item["text_emb"] = s.image_emb, s.text_emb  # the collate stacks them into tensors
            spent[1] += time.thread_time() - start
        return item


def _tokens(items: list[dict]) -> torch.Tensor:
    tokens = np.zeros((len(items), MAX_TOKENS), dtype=np.int64)
    for i, it in enumerate(items):
        tokens[i, : len(it["tokens"])] = it["tokens"]
    return torch.from_numpy(tokens)


class Collate:
    """collate, then (normalise=True) the uint8 images as float32 normalised on the host; items
    with JPEG bytes (device preprocessing): the batch's JPEG bytes as a list (the rank fills in the
    pixel counts). In a DataLoader worker the batch is made in shared memory and handed over
    (hand_over), timed as `send`. Picklable."""

    def __init__(self, normalise: bool = False):
        self.normalise = normalise

    def __call__(self, items: list[dict]) -> dict:
        account = getattr(items, "stage_s", None)
        in_worker = get_worker_info() is not None
        alloc = BatchAlloc(shared=in_worker)
        batch, collate_s, normalise_s = self._collate(items, alloc)
        if account is not None:  # the stages of this batch, carried to the rank (harness.train.stagetimer)
            # the shared allocation is the hand-over's (send); the collate is the writing into it
            account["collate"] = account.get("collate", 0.0) + collate_s - (alloc.seconds if in_worker else 0.0)
            account["transform"] = account.get("transform", 0.0) + normalise_s
            if in_worker:
                stagetimer.resume(account)
                start = time.thread_time()
                hand_over(batch, alloc)
                stagetimer.add("send", time.thread_time() - start + alloc.seconds)
                stagetimer.worker_end(account)
            batch[STAGE_KEY] = account
        elif in_worker:
            hand_over(batch, alloc)
        return batch

    def _collate(self, items: list[dict], alloc: BatchAlloc) -> tuple[dict, float, float]:
        """The collated batch, the seconds of its collate, and of its host normalisation (a
        transform), each timed around its call."""
        start = time.thread_time()
        if "jpeg" in items[0]:
            batch = {"index": torch.tensor([it["index"] for it in items], dtype=torch.int64),
                     "nbytes": sum(it["nbytes"] for it in items),
                     "cache_stats": getattr(items, "cache_stats", None),
                     "jpegs": [it["jpeg"] for it in items], "tokens": _tokens(items),
                     "padded_pixels": 0, "real_pixels": 0}
            return batch, time.thread_time() - start, 0.0
        batch = collate(items, alloc)
        collated = time.thread_time()
        if not (self.normalise and "images" in batch):
            return batch, collated - start, 0.0
        batch["images"] = normalise(batch["images"])
        alloc.release_unused(batch)  # the uint8 images' arena: free again at once, not left taken for good
        return batch, collated - start, time.thread_time() - collated


def collate(items: list[dict], alloc: BatchAlloc | None = None) -> dict:
    """Stack a batch; pixels are zero-padded to the largest height and width of the batch, each
    image written once into its slot of a channels-last batch (mirrored where `items.flips`
    says)."""
    alloc = alloc or BatchAlloc()
    batch = {
        "index": torch.tensor([it["index"] for it in items], dtype=torch.int64),
        "nbytes": sum(it["nbytes"] for it in items),
        "cache_stats": getattr(items, "cache_stats", None),
    }
    if "image" in items[0]:
        h = max(it["image"].shape[0] for it in items)
        w = max(it["image"].shape[1] for it in items)
        nhwc = alloc((len(items), h, w, 3), torch.uint8, zero=False)
        pad = alloc.reused  # the arena holds an earlier batch: the padding is written here (a new one is zeros)
        slots = nhwc.numpy()  # numpy copies whole rows into a slot; torch mirrors an image faster than numpy
        flips = getattr(items, "flips", None) or [False] * len(items)
        real_pixels = 0
        for i, (it, flip) in enumerate(zip(items, flips)):
            ih, iw, _ = it["image"].shape
            slots[i, :ih, :iw] = torch.flip(torch.from_numpy(it["image"]), dims=(1,)).numpy() if flip else it["image"]
            if pad and iw < w:
                slots[i, :ih, iw:] = 0
            if pad and ih < h:
                slots[i, ih:] = 0
            real_pixels += ih * iw
        batch.update(images=nhwc.permute(0, 3, 1, 2), tokens=_tokens(items),
                     padded_pixels=len(items) * h * w, real_pixels=real_pixels)
    else:
        batch.update(image_emb=_stack([it["image_emb"] for it in items], alloc),
                     text_emb=_stack([it["text_emb"] for it in items], alloc), padded_pixels=0, real_pixels=0)
    return batch


def _stack(rows: list[np.ndarray], alloc: BatchAlloc) -> torch.Tensor:
    """The rows stacked into one tensor, in a worker's shared arena from the start (every byte
    written)."""
    if not alloc.shared:
        return torch.from_numpy(np.stack(rows))
    out = alloc((len(rows), *rows[0].shape), getattr(torch, rows[0].dtype.name), zero=False)
    np.stack(rows, out=out.numpy())
    return out
