"""torch's DistributedSampler: a seeded shuffle, padded to a multiple of the world size, strided by
rank."""
from __future__ import annotations

from torch.utils.data.distributed import DistributedSampler

from strategies.protocols import SamplerBase
from strategies.registry import register


@register("sampler", "default")
class DefaultSampler(SamplerBase):
    def sampler(self, size: int, num_replicas: int, rank: int, seed: int, costs=None,
                batch_size: int = 1) -> DistributedSampler:
        """``costs`` and ``batch_size`` are not used: the stride ignores both."""
        return DistributedSampler(range(size), num_replicas=num_replicas, rank=rank, shuffle=True,
                                  seed=seed, drop_last=False)
