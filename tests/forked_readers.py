"""Shared by the storage tests: a reader used in the parent, then in forked DataLoader workers."""
from __future__ import annotations

import os

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset


class BatchDataset(Dataset):
    def __init__(self, reader):
        self.reader = reader

    def __len__(self):
        return len(self.reader)

    def __getitems__(self, indices):
        return [(s.index, os.getpid(), s.jpeg, torch.from_numpy(s.image_emb)) for s in self.reader.read_batch(indices)]

    def __getitem__(self, i):  # pragma: no cover - DataLoader uses __getitems__
        return self.__getitems__([i])[0]


def _collate(items):
    return items


def check_forked_workers(reader, expected: list) -> None:
    """The reader opened its handles in the parent; two forked workers read every sample right, each
    in its own process, and the parent still reads afterwards."""
    reader.read_batch([0, 1])  # the parent opens its handles before the fork
    loader = DataLoader(BatchDataset(reader), batch_size=8, shuffle=True,
                        generator=torch.Generator().manual_seed(0), num_workers=2,
                        multiprocessing_context="fork", collate_fn=_collate)
    seen, pids = [], set()
    for batch in loader:
        for index, pid, jpeg, emb in batch:
            assert jpeg == expected[index].jpeg
            assert np.array_equal(emb.numpy(), expected[index].image_emb)
            seen.append(index)
            pids.add(pid)
    assert sorted(seen) == list(range(len(expected)))
    assert os.getpid() not in pids and len(pids) == 2
    assert reader.read_batch([3])[0].same_as(expected[3])
