"""LitData storage: chunks written with ``litdata.optimize`` and read through litdata's own reader,
``litdata.StreamingDataset``, by index (``dataset[i]``), so every sampler applies.

Layout under ``path``::

    meta.json            {"format": "litdata", "version": 1, "count": N, "chunk_size": S}
    index.json           litdata's index: its config (one item's pytree, serializers), the chunks
    chunk-0-K.bin        litdata chunk K: S items in index order (uint32 item count, uint32
                         offsets, then each item's serialized fields); one item is the dict
                         {"index", "jpeg", "caption", "image_emb", "text_emb"} (bytes, str, two
                         float32 arrays)
    stored_bytes.npy     int64[N]: each item's bytes in its chunk (from the chunks' offset tables)

Writing: the samples stream into a ``multiprocessing`` queue that ``litdata.optimize`` reads (its
documented way to optimise a stream: nothing is held in memory beyond the queue's bound), one
worker, ordered, so chunk K holds samples [K*S, (K+1)*S). ``optimize`` sets the multiprocessing
start method for the whole process; it is given ``fork`` (Linux's default) and the previous method
is put back after. Reading: a reader creates its ``StreamingDataset`` lazily in each process (after
a fork the child creates its own) over the local folder (no cache copy: litdata reads local chunks
in place, memory-mapped) and reads a batch one ``dataset[i]`` at a time, in index order (litdata's
reader keeps one chunk open: each move to another chunk costs about 0.1 ms on the 2-core machine,
so a batch sorted by index moves at most once per chunk), returned in request order; litdata
deserialises a whole item, so every field is decoded whatever ``fields`` asks (the others are
dropped).

litdata is an optional extra (``pip install -e ".[litdata]"``, or on a CPU torch litdata alone with
``--no-deps``, from requirements-nodeps.txt, and its other dependencies, the extra
``litdata-deps``: the README's test command installs both); without it, selecting this storage is
one line naming the ways. litdata 0.2.76 declares torchvision as a dependency but does not import
it: installed with ``--no-deps`` and its other dependencies it loads beside the CPU torch (see
docs/own-data.md). Random access: ``batch_decode=0`` (see ``BATCH_DECODE``).
"""
from __future__ import annotations

import json
import multiprocessing as mp
import os
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from strategies.params import integer
from strategies.registry import Unavailable, register
from strategies.sample import FIELDS, Sample
from strategies.storage.advice import Advised, FileRanges, checked, fd_will_need
from strategies.storage.base import (
    LazyHandle,
    PicklesUnmapped,
    StoredBytesSidecar,
    TrackedStorage,
    checked_fields,
    checked_indices,
    in_order,
    in_request_order,
    read_count,
    sorted_order,
    write_meta,
)

DEFAULT_CHUNK_SIZE = 64  # samples per chunk: the shards sampler's default shard, like the tar shards
# litdata's batch_decode: 0 deserialises only the item asked for. Its default ("auto") deserialises a window of
# up to 256 items around it (the whole 64-item chunk here) on every move to another chunk: 118 ms for 64
# samples alternating between two chunks against 0.8 ms for 64 in one chunk, measured on the 2-core machine;
# per item, random access costs what sequential access does.
BATCH_DECODE = 0
QUEUE_BOUND = 256  # samples in flight between the writer and litdata's worker
INSTALL = ("the litdata storage needs the litdata package: pip install --no-deps litdata==0.2.76 and its other "
           "dependencies, pip install -e '.[litdata-deps]' (the README's test command installs both, litdata from "
           "requirements-nodeps.txt; litdata declares torchvision but never imports it, and --no-deps keeps torch "
           "as it is), or pip install -e '.[litdata]' where torchvision matches torch")


def _litdata():
    try:
        import litdata
        from litdata.utilities import breakpoint as debugger
    except ImportError:
        raise Unavailable(INSTALL) from None
    if not isinstance(debugger._stdin_lock, type(threading.Lock())):
        # litdata's import makes a multiprocessing lock for its multi-process pdb helper; a rank that ends
        # with os._exit never releases it and the resource tracker warns of a leaked semaphore at shutdown.
        # A thread lock serves that helper within a process; the multiprocessing one is released here.
        debugger._stdin_lock = threading.Lock()
    return litdata


def _item(sample: dict) -> dict:
    """litdata.optimize's fn: the queued item as it is (module level, so a worker can import
    it)."""
    return sample


def _as_item(s: Sample) -> dict:
    return {"index": s.index, "jpeg": bytes(s.jpeg), "caption": s.caption,
            "image_emb": np.ascontiguousarray(s.image_emb, dtype=np.float32),
            "text_emb": np.ascontiguousarray(s.text_emb, dtype=np.float32)}


def _chunk_items_bytes(chunk: Path) -> np.ndarray:
    """Each item's bytes in a litdata chunk, from its header: uint32 count, then count+1 uint32
    offsets."""
    with open(chunk, "rb") as f:
        n = int(np.frombuffer(f.read(4), dtype="<u4")[0])
        offsets = np.frombuffer(f.read(4 * (n + 1)), dtype="<u4").astype(np.int64)
    return np.diff(offsets)


def _chunks(path: Path) -> list[dict]:
    with open(Path(path) / "index.json") as f:
        return json.load(f)["chunks"]


def _optimize(samples: Iterable[Sample], path: Path, count: int, chunk_size: int) -> None:
    litdata = _litdata()
    from litdata.processing.data_processor import ALL_DONE

    queue = mp.get_context("fork").Queue(maxsize=QUEUE_BOUND)
    failure: list[BaseException] = []

    def feed() -> None:
        try:
            for _, s in in_order(samples, count):
                queue.put(_as_item(s))
        except BaseException as err:  # noqa: BLE001 - re-raised in the writing thread below
            failure.append(err)
        finally:
            queue.put(ALL_DONE)

    feeder = threading.Thread(target=feed, name="litdata-feed", daemon=True)
    previous = mp.get_start_method(allow_none=True)
    feeder.start()
    try:
        litdata.optimize(fn=_item, queue=queue, output_dir=str(path), chunk_size=chunk_size, num_workers=1,
                         keep_data_ordered=True, mode="overwrite", verbose=False, start_method="fork")
    finally:
        feeder.join()
        mp.set_start_method(previous, force=True)
    if failure:
        raise failure[0]


class LitdataReader(StoredBytesSidecar, Advised, PicklesUnmapped):
    """litdata opens and reads its chunk files itself, so no per-descriptor hint reaches them (a
    chunk file is small, and read-ahead stops at its end). Under "sequential" every chunk file a
    batch touches is asked for whole first (POSIX_FADV_WILLNEED: a streamed chunk is read whole
    anyway); the hint goes on the ``stored_bytes`` map (strategies.storage.advice)."""

    def __init__(self, path: Path, fields: Sequence[str] = FIELDS, advice: str = "auto"):
        self.path = Path(path)
        self.fields = checked_fields(fields)
        self.advice = checked(advice)
        self._count = read_count(self.path)
        self.batch_decode = BATCH_DECODE
        self._dataset = LazyHandle(self._open)
        self._chunk_ends = LazyHandle(self._read_chunk_ends)  # per process; not pickled
        self._stored: np.ndarray | None = None

    def _read_chunk_ends(self) -> tuple[np.ndarray, list[str]]:
        chunks = _chunks(self.path)
        return np.cumsum([int(c["chunk_size"]) for c in chunks]), [c["filename"] for c in chunks]

    def _will_need(self, sorted_idx: np.ndarray) -> None:
        ends, names = self._chunk_ends.get()
        for k in np.unique(np.searchsorted(ends, sorted_idx, side="right")).tolist():
            ranges = FileRanges(self.path / names[k])
            try:
                fd_will_need(ranges.fd, [(0, os.fstat(ranges.fd).st_size)])
            finally:
                ranges.close()

    def _open(self):
        return _litdata().StreamingDataset(str(self.path), batch_decode=self.batch_decode)

    def __len__(self) -> int:
        return self._count

    def read_batch(self, indices: Sequence[int]) -> list[Sample]:
        idx = checked_indices(indices, self._count)
        order, sorted_idx = sorted_order(idx)  # chunk by chunk: litdata's reader keeps one chunk open
        if self.hint == "sequential" and len(sorted_idx):
            self._will_need(sorted_idx)
        dataset = self._dataset.get()
        out = []
        for i in sorted_idx.tolist():
            item = dataset[i]
            s = Sample(index=i)
            if int(item["index"]) != i:
                raise KeyError(f"{self.path}: litdata item {i} holds sample {item['index']}; rerun with "
                               f"--regenerate to write it again")
            if "jpeg" in self.fields:
                s.jpeg = bytes(item["jpeg"])
            if "caption" in self.fields:
                s.caption = str(item["caption"])
            for name in ("image_emb", "text_emb"):
                if name in self.fields:
                    setattr(s, name, np.array(item[name], dtype=np.float32))  # an owned copy
            out.append(s)
        return in_request_order(out, order)

    def close(self) -> None:
        self._dataset.close()
        self._chunk_ends.close()
        self._stored = None


@register("storage", "litdata")
class LitdataStorage(TrackedStorage):
    """``chunk_size``: samples per litdata chunk (the shards the ``shards`` sampler streams);
    ``advice``: the readers' access hint (strategies.storage.advice)."""

    name = "litdata"

    def __init__(self, chunk_size: int = DEFAULT_CHUNK_SIZE, advice: str = "auto"):
        _litdata()  # selecting the storage without the package is one line naming the extra
        self.chunk_size = integer("chunk_size", chunk_size, 1)
        self.advice = checked(advice)

    @property
    def variant(self) -> str:
        """What the written files depend on besides the spec, as a directory-name suffix."""
        return f"-chunk{self.chunk_size}"

    def write(self, samples: Iterable[Sample], path: Path, count: int) -> None:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        _optimize(samples, path, count, self.chunk_size)
        chunks = _chunks(path)
        stored = np.concatenate([_chunk_items_bytes(path / c["filename"]) for c in chunks]) if chunks else \
            np.zeros(0, dtype=np.int64)
        if len(stored) != count:
            raise ValueError(f"litdata wrote {len(stored)} items under {path}, expected {count}")
        np.save(path / "stored_bytes.npy", stored.astype(np.int64))
        write_meta(path, "litdata", count, chunk_size=self.chunk_size)

    def open(self, path: Path, fields: Sequence[str] = FIELDS) -> LitdataReader:
        return self.track(LitdataReader(path, fields, self.advice), path)

    def file_names(self, path: Path) -> list[str]:
        return ["meta.json", "index.json", "stored_bytes.npy"] + [c["filename"] for c in _chunks(path)]

    def shard_ranges(self, path: Path) -> list[range]:
        """litdata's chunks as index ranges, from its index.json (one worker wrote them in index
        order)."""
        out, start = [], 0
        for chunk in _chunks(path):
            out.append(range(start, start + int(chunk["chunk_size"])))
            start = out[-1].stop
        return out
