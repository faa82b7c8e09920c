"""Samplers that fail on purpose, for the fault-isolation tests: `hang` never yields on rank 1 (the cell
must hit its deadline), `crash` raises on rank 1 (a strategy that raises)."""
from __future__ import annotations

import time

from torch.utils.data import DistributedSampler

from strategies.protocols import SamplerBase
from strategies.registry import register


class _Failing(DistributedSampler):
    def __init__(self, size: int, num_replicas: int, rank: int, how: str):
        super().__init__(range(size), num_replicas=num_replicas, rank=rank, shuffle=False)
        self.how = how

    def __iter__(self):
        if self.rank == 1:
            if self.how == "hang":
                time.sleep(3600)
            raise RuntimeError("the crash sampler failed on purpose")
        return super().__iter__()


@register("sampler", "hang")
class HangSampler(SamplerBase):
    def sampler(self, size, num_replicas, rank, seed, costs, batch_size):
        return _Failing(size, num_replicas, rank, "hang")


@register("sampler", "crash")
class CrashSampler(SamplerBase):
    def sampler(self, size, num_replicas, rank, seed, costs, batch_size):
        return _Failing(size, num_replicas, rank, "crash")
