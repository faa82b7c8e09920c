"""What every distributed sampler here shares with torch's DistributedSampler: the epoch's sizes.

Each rank gets ``ceil(size / num_replicas)`` indices per epoch (the epoch is padded to a multiple
of the world size as torch pads), the order depends on (seed, epoch), and ``set_epoch`` moves to
the next one.
"""
from __future__ import annotations

import math

from torch.utils.data import Sampler


class DistributedEpochs(Sampler[int]):
    def __init__(self, size: int, num_replicas: int, rank: int, seed: int) -> None:
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank {rank} is not in [0, {num_replicas})")
        self.size, self.num_replicas, self.rank, self.seed, self.epoch = size, num_replicas, rank, seed, 0
        self.num_samples = math.ceil(size / num_replicas)
        self.total_size = self.num_samples * num_replicas

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.num_samples
