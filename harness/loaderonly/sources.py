"""What the read-path benchmark (harness.loaderonly.readpath, ``--loader-only``) times, and how: a
source's ``read(argument(batch))`` timed alone, batch after batch. The sources:

* ``StorageReads``: a storage's reader (``reader.read_batch`` given the batch as a list of ints, as
  a DataLoader hands it), reopenable;
* ``RamGather``: the limit. The fields already in RAM (numpy arrays; for jpeg and caption one bytes
  buffer with offsets), read once from the mmap materialisation, gathered with one fancy index per
  array (one slice per sample for bytes);
* ``ArticleHdf5``: the first article's Dataset: one h5py file opened once for
  single-writer-multiple-reader reading, then ``dataset[i]`` per row and per field, each row
  wrapped with ``torch.from_numpy``; ``write_article_file`` writes that file the article's way
  (resizable datasets, h5py's automatic chunking, the latest file format, a batch of rows at a
  time).

Only the read is timed: what runs before each batch (``prepare``: the cold page cache), the batch's
conversion to what the source takes, and counting the bytes delivered are not. Imports no other
wing.
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import h5py
import numpy as np
import torch

ARTICLE_WRITE_BATCH = 10_000  # the article converts in batches of this many rows


def random_batches(count: int, batch_size: int, n: int, seed: int) -> list[np.ndarray]:
    """``n`` random batches: distinct indices within a batch (with replacement when the dataset is
    smaller)."""
    rng = np.random.default_rng(seed)
    replace = count < batch_size
    return [rng.choice(count, size=batch_size, replace=replace) for _ in range(n)]


def timed(source: ReadSource, batches: list[np.ndarray], prepare: Callable[[], None] | None, seconds: float,
          min_batches: int) -> tuple[float, int, int]:
    """(seconds spent in ``source.read``, samples, bytes delivered) over the batches, stopping once
    ``seconds`` of reading and ``min_batches`` batches are done. Only the read is timed:
    ``prepare`` (run before each batch), the batch's conversion to what the source takes, and
    counting the bytes are not."""
    spent, samples, nbytes = 0.0, 0, 0
    for k, batch in enumerate(batches):
        if prepare is not None:
            prepare()
        arg = source.argument(batch)
        start = time.perf_counter()
        got = source.read(arg)
        spent += time.perf_counter() - start
        samples += len(batch)
        nbytes += source.nbytes(got)
        if spent >= seconds and k + 1 >= min_batches:
            break
    return spent, samples, nbytes


class ReadSource:
    """What is timed: ``read(argument(batch))``; ``nbytes`` of what it returned is counted untimed;
    ``reopen`` before a cold batch (the files closed and opened again), ``close`` at the end."""

    def argument(self, batch: np.ndarray):
        return batch

    def read(self, argument) -> list:
        raise NotImplementedError

    @staticmethod
    def nbytes(got: list) -> int:
        raise NotImplementedError

    def reopen(self) -> None:
        pass

    def close(self) -> None:
        pass

    def __call__(self, batch: np.ndarray):
        return self.read(self.argument(batch))


class StorageReads(ReadSource):
    """A storage reader (given the batch as a list of ints, as a DataLoader hands it),
    reopenable."""

    def __init__(self, storage, path: Path, fields: Sequence[str]):
        self.storage, self.path, self.fields = storage, path, fields
        self.reader = storage.open(path, fields=fields)

    def argument(self, batch: np.ndarray) -> list[int]:
        return batch.tolist()

    def read(self, indices: list[int]) -> list:
        return self.reader.read_batch(indices)

    @staticmethod
    def nbytes(samples: list) -> int:
        return sum(s.nbytes for s in samples)

    def reopen(self) -> None:
        self.reader.close()
        self.reader = self.storage.open(self.path, fields=self.fields)

    def close(self) -> None:
        self.reader.close()


class RamGather(ReadSource):
    """The fields in RAM, read once from the mmap materialisation; a batch is one gather per array.
    RAM has no cold state: ``reopen`` does nothing."""

    def __init__(self, path: Path, fields: Sequence[str]):
        self.arrays = {f: np.load(path / f"{f}.npy") for f in fields if f.endswith("_emb")}
        self.flat = {f: ((path / f"{f}.bin").read_bytes(), np.load(path / f"{f}_offsets.npy"))
                     for f in fields if not f.endswith("_emb")}

    def read(self, batch: np.ndarray) -> list:
        out = [a[batch] for a in self.arrays.values()]
        for flat, offs in self.flat.values():
            out.append([flat[a:b] for a, b in zip(offs[batch].tolist(), offs[batch + 1].tolist())])
        return out

    @staticmethod
    def nbytes(got: list) -> int:
        return sum(x.nbytes if isinstance(x, np.ndarray) else sum(map(len, x)) for x in got)


def write_article_file(path: Path, reader, emb_dims: dict[str, int]) -> Path:
    """The article's HDF5 file at ``path``, written once from ``reader`` (a storage reader of every
    field: ``len`` and ``read_batch``): datasets created empty and resizable (h5py chooses the
    chunks), grown and written a batch at a time (the JPEG field only where the data has one).
    ``emb_dims``: the embedding fields' widths. Written under a temporary name, then renamed; an
    existing file is kept."""
    path = Path(path)
    if path.exists():
        return path
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    try:
        with h5py.File(tmp, "w", libver="latest") as f:
            dsets = {name: f.create_dataset(name, shape=(0, dim), maxshape=(None, dim), dtype=np.float32)
                     for name, dim in emb_dims.items()}
            if len(reader) and reader.read_batch([0])[0].jpeg:  # --scale full writes no JPEG: no dataset
                dsets["jpeg"] = f.create_dataset("jpeg", shape=(0,), maxshape=(None,),
                                                 dtype=h5py.vlen_dtype(np.uint8))
            dsets["caption"] = f.create_dataset("caption", shape=(0,), maxshape=(None,),
                                                dtype=h5py.string_dtype("utf-8"))
            for a in range(0, len(reader), ARTICLE_WRITE_BATCH):
                got = reader.read_batch(range(a, min(len(reader), a + ARTICLE_WRITE_BATCH)))
                b = a + len(got)
                for name, ds in dsets.items():
                    ds.resize(b, axis=0)
                    ds[a:b] = _article_column(name, got)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


def _article_column(name: str, got: list) -> np.ndarray:
    if name == "jpeg":
        column = np.empty(len(got), dtype=object)
        column[:] = [np.frombuffer(s.jpeg, dtype=np.uint8) for s in got]
        return column
    if name == "caption":
        return np.array([s.caption for s in got], dtype=object)
    return np.stack([getattr(s, name) for s in got])


class ArticleHdf5(ReadSource):
    """The first article's Dataset: one h5py file, ``dataset[i]`` per row and per field."""

    def __init__(self, path: Path, fields: Sequence[str]):
        self.path, self.fields = path, fields
        self.file = None
        self.reopen()

    def reopen(self) -> None:
        if self.file is not None:
            self.file.close()
        self.file = h5py.File(self.path, "r", libver="latest", swmr=True)
        self.dsets = [self.file[f] for f in self.fields]

    def argument(self, batch: np.ndarray) -> list[int]:
        return batch.tolist()

    def read(self, indices: list[int]) -> list:
        out = []
        for i in indices:  # the article's __getitem__, once per index
            row = [ds[i] for ds in self.dsets]
            out.append([torch.from_numpy(x) if isinstance(x, np.ndarray) and x.dtype != object else x
                        for x in row])
        return out

    @staticmethod
    def nbytes(got: list) -> int:
        return sum(x.numel() * x.element_size() if isinstance(x, torch.Tensor) else len(x)
                   for row in got for x in row)

    def close(self) -> None:
        self.file.close()
        self.file = None
