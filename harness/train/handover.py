"""How a batch leaves the DataLoader worker that made it, and the memory it is made in.

A DataLoader worker hands each batch to its rank through a queue: the batch is pickled, a tensor's
memory by a file descriptor (shared memory), which the worker's resource sharer serves and the rank
fetches over a socket. Left to PyTorch, every tensor of every batch is a new shared-memory file:
made, faulted in page by page and zeroed by the kernel, copied into, then unmapped, with one
descriptor per tensor. Here:

* the batch's large tensors are written in place in a shared arena (`Slab`) of the worker's pool
  (`SlabPool`), one memfd mapping reused across batches. Each arena's first byte is its flag: the
  worker sets it when it hands the arena over, the rank clears it when its last tensor on the arena
  is gone (its mapping's `__del__`, which runs when the last tensor or view on it is freed), and
  the worker writes an arena again only once it is clear (the collate then writes a batch's padding
  zeros, which a new arena holds already);
* a small tensor (index, tokens, a JPEG's bytes) crosses in the pickle (`ByValue`): a file
  descriptor costs the worker's resource sharer and the rank more than copying a few kilobytes;
* one descriptor per arena, so one per batch (two for the features workload's embeddings).

In the rank process (the thread loaders, `workers = 0`) a batch never leaves the process, but a
fresh allocation per batch costs the same page faults and zeroing: there the batch is written in an
arena of `LocalPool`, a bytearray reused once no tensor on it is left (its reference count).

`BatchAlloc` gives the collate its tensors from the one pool or the other. `hand_over` readies a
worker's batch for the queue.
"""
from __future__ import annotations

import math
import mmap
import os
import sys
import threading
import time
from multiprocessing.reduction import DupFd

import numpy as np
import torch

HEADER = 64  # bytes before an arena's data: byte 0 is its flag, the rest keeps the data aligned
FREE, WITH_RANK = 0, 1
# a tensor under this many bytes crosses a DataLoader worker's queue in the pickle (ByValue), not in shared memory
SMALL_BYTES = 64 * 1024
ROUND = 1 << 20  # an arena's size is a multiple of this, so that batches of varying shape reuse it
POOL_SIZE = 16  # arenas a worker keeps; a batch finding none free beyond these gets an arena of its own


class Slab:
    """A shared arena of a worker: a memfd mapping, its first byte the flag (FREE or WITH_RANK)."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.fd = os.memfd_create("dlbench-batch", os.MFD_CLOEXEC)
        os.ftruncate(self.fd, HEADER + capacity)  # zero-filled by the kernel
        self.map = mmap.mmap(self.fd, HEADER + capacity)
        self.tensors: list[torch.Tensor] = []  # what the worker wrote in it for the batch it holds

    def free(self) -> bool:
        return self.map[0] == FREE

    def tensor(self, shape: tuple, dtype: torch.dtype, zero: bool) -> torch.Tensor:
        """A tensor of `shape` at the arena's start, handed over (flag set); zero: its bytes
        zeroed."""
        self.map[0] = WITH_RANK
        count = math.prod(shape)
        if zero:
            np.frombuffer(self.map, dtype=np.uint8, count=count * dtype.itemsize, offset=HEADER).fill(0)
        out = torch.frombuffer(self.map, dtype=dtype, count=count, offset=HEADER).view(shape)
        self.tensors = [out]
        return out

    def __del__(self):  # the worker dropped it (out of the pool, and no tensor left): the rank's copy stays
        os.close(self.fd)


class SlabPool:
    """A worker's arenas, reused once the rank has dropped what it received in them."""

    def __init__(self, size: int = POOL_SIZE):
        self.size = size
        self.slabs: list[Slab] = []

    def take(self, nbytes: int) -> tuple[Slab, bool]:
        """An arena of at least nbytes, and whether it was used before (its bytes need zeroing)."""
        free = [s for s in self.slabs if s.free()]
        fits = [s for s in free if s.capacity >= nbytes]
        if fits:
            return min(fits, key=lambda s: s.capacity), True
        slab = Slab(-(-max(nbytes, 1) // ROUND) * ROUND)
        if len(self.slabs) >= self.size and free:  # make room: the smallest free arena goes
            self.slabs.remove(min(free, key=lambda s: s.capacity))
        if len(self.slabs) < self.size:
            self.slabs.append(slab)
        return slab, False


_POOL: dict = {"pid": None, "pool": None}


def worker_pool() -> SlabPool:
    """This process's pool (a DataLoader worker's; made on its first batch)."""
    if _POOL["pid"] != os.getpid():
        _POOL.update(pid=os.getpid(), pool=SlabPool())
    return _POOL["pool"]


class LocalPool:
    """Arenas for the batches of the loaders that run in the rank process: bytearrays, each reused
    once no tensor on it is left (a tensor made by torch.frombuffer holds a reference to its
    bytearray)."""

    def __init__(self, size: int = POOL_SIZE):
        self.size = size
        self.arenas: list[bytearray] = []
        self.lock = threading.Lock()  # the thread loaders take arenas from several threads

    def _references(self) -> list[tuple[bytearray, int]]:
        """Each arena and what sys.getrefcount reads for it here (the one place it is read, so that
        the count of an arena no tensor holds is measured by the same code: _idle_references)."""
        return [(a, sys.getrefcount(a)) for a in self.arenas]

    def _idle(self) -> list[bytearray]:
        return [a for a, refs in self._references() if refs <= _IDLE_REFS]

    def tensor(self, shape: tuple, dtype: torch.dtype, zero: bool = True) -> tuple[torch.Tensor, bool]:
        """A tensor of `shape` in an idle arena or a new one, and whether the arena was used before
        (if so, and zero, its bytes are zeroed; else they hold an earlier batch's)."""
        count = math.prod(shape)
        nbytes = count * dtype.itemsize
        if not count:
            return torch.zeros(shape, dtype=dtype), False
        with self.lock:  # an arena is taken (a tensor on it made) before another thread can see it idle
            idle = self._idle()
            fits = [a for a in idle if len(a) >= nbytes]
            arena = min(fits, key=len) if fits else bytearray(-(-nbytes // ROUND) * ROUND)  # zeroed
            if not fits:
                if len(self.arenas) >= self.size and idle:
                    self.arenas.remove(min(idle, key=len))
                if len(self.arenas) < self.size:
                    self.arenas.append(arena)
            out = torch.frombuffer(arena, dtype=dtype, count=count).view(shape)
        if fits and zero:
            out.zero_()
        return out, bool(fits)


def _idle_references() -> int:
    """What LocalPool._references reads for an arena no tensor holds (CPython's count: the pool's
    list, the comprehension's variable, the call's argument; measured, as it differs between Python
    versions)."""
    probe = LocalPool()
    probe.arenas.append(bytearray(8))
    return probe._references()[0][1]


_IDLE_REFS = _idle_references()
_LOCAL = LocalPool()


class BatchAlloc:
    """Tensors for a batch, the seconds spent allocating them kept (`seconds`). shared: each from
    an arena of this worker's pool (what the queue hands over without copying), else from the
    process's LocalPool. A tensor is zeroed unless the call says zero=False; then `reused` says
    whether its arena held an earlier batch (its bytes are that batch's: the caller writes every
    byte, padding included) or is new (zeros)."""

    def __init__(self, shared: bool = False):
        self.shared, self.seconds, self.reused = shared, 0.0, False
        self.slabs: list[Slab] = []

    def __call__(self, shape: tuple, dtype: torch.dtype, zero: bool = True) -> torch.Tensor:
        start = time.thread_time()
        if self.shared:
            slab, self.reused = worker_pool().take(math.prod(shape) * dtype.itemsize)
            out = slab.tensor(shape, dtype, zero=zero and self.reused)
            self.slabs.append(slab)
        else:
            out, self.reused = _LOCAL.tensor(shape, dtype, zero)
        self.seconds += time.thread_time() - start
        return out


    def release_unused(self, batch: dict) -> None:
        """Free the arenas whose tensor the batch no longer holds (a transform replaced it, e.g.
        the host normalisation's float32 images): never handed to the rank, they would stay taken
        for good."""
        held = {v.untyped_storage().data_ptr() for v in _tensors(batch)}
        for slab in [s for s in self.slabs if s.tensors and s.tensors[0].untyped_storage().data_ptr() not in held]:
            slab.tensors = []
            slab.map[0] = FREE
            self.slabs.remove(slab)


def _tensors(batch: dict) -> list[torch.Tensor]:
    values = [x for v in batch.values() for x in (v if isinstance(v, list) else [v])]
    return [v for v in values if isinstance(v, torch.Tensor)]


class SlabTensor:
    """A tensor in a worker's arena as it crosses the queue: the arena's descriptor and the
    tensor's layout. Unpickled on the rank as a plain tensor over the rank's own mapping
    (rebuild)."""

    def __init__(self, slab: Slab, tensor: torch.Tensor):
        self.slab, self.tensor = slab, tensor

    def __reduce__(self):
        t = self.tensor
        return rebuild, (DupFd(self.slab.fd), HEADER + self.slab.capacity, t.dtype, tuple(t.shape), t.stride(),
                         t.storage_offset())


class RankMapping(mmap.mmap):
    """The rank's mapping of an arena: once no tensor uses it, the arena's flag is cleared for the
    worker."""

    def __del__(self):
        if not self.closed:
            self[0] = FREE


def rebuild(fd_handle, length: int, dtype: torch.dtype, shape: tuple, stride: tuple, offset: int) -> torch.Tensor:
    """The rank's side of SlabTensor: the arena mapped here and the tensor over it."""
    fd = fd_handle.detach()
    try:
        mapping = RankMapping(fd, length)
    finally:
        os.close(fd)
    count = (length - HEADER) // dtype.itemsize
    return torch.frombuffer(mapping, dtype=dtype, count=count, offset=HEADER).as_strided(shape, stride, offset)


class ByValue:
    """A small tensor that crosses a DataLoader worker's queue in the pickle's bytes, unpickled on
    the rank as a plain tensor."""

    __slots__ = ("array",)

    def __init__(self, tensor: torch.Tensor):
        self.array = tensor.numpy()

    def __reduce__(self):
        return torch.from_numpy, (self.array,)


def hand_over(batch: dict, alloc: BatchAlloc | None = None) -> None:
    """In a DataLoader worker: each tensor of the batch (and of a list in it) made ready for the
    queue: one in an arena of `alloc` as a SlabTensor, a small one ByValue, any other moved into
    shared memory."""
    slabs = {} if alloc is None else {s.tensors[0].data_ptr(): s for s in alloc.slabs}

    def ready(value):
        if not isinstance(value, torch.Tensor):
            return value
        slab = slabs.get(value.untyped_storage().data_ptr())
        if slab is not None:
            return SlabTensor(slab, value)
        if value.numel() * value.element_size() < SMALL_BYTES:
            return ByValue(value)
        return value.share_memory_()

    for key, value in batch.items():
        batch[key] = [ready(v) for v in value] if isinstance(value, list) else ready(value)
