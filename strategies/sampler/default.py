"""torch's DistributedSampler: a seeded shuffle, padded to a multiple of the world size, strided by rank."""
from __future__ import annotations

from torch.utils.data.distributed import DistributedSampler

from strategies.registry import register


@register("sampler", "default")
class DefaultSampler:
    def sampler(self, size: int, num_replicas: int, rank: int, seed: int, **_context):
        return DistributedSampler(range(size), num_replicas=num_replicas, rank=rank, shuffle=True,
                                  seed=seed, drop_last=False)
