"""Strategies written like the blog posts' code, bugs included, to show the harness catches them.

`seed_balance` follows the first seed's DistributedSamplerWithBalance: every rank walks the same prefix of
the indices until it has 1/world of the total weight, so all ranks train on the same samples and most of
the dataset is never seen. `uneven` batching gives rank 0 batches half the size of the others', so ranks
have different numbers of batches per epoch (a deliberately uneven case that must not hang).
"""
from __future__ import annotations

from torch.utils.data import BatchSampler, Sampler

from strategies.protocols import BatchingBase, SamplerBase
from strategies.registry import register


class _PrefixSampler(Sampler):
    def __init__(self, weights, num_replicas: int):
        self.weights = weights
        self.num_replicas = num_replicas

    def set_epoch(self, epoch: int) -> None:
        pass

    def _indices(self) -> list[int]:
        target = sum(self.weights) // self.num_replicas
        selected, current = [], 0
        for idx in range(len(self.weights)):
            if current < target or not selected:
                selected.append(idx)
                current += self.weights[idx]
            else:
                break
        return selected

    def __iter__(self):
        return iter(self._indices())

    def __len__(self) -> int:
        return len(self._indices())


@register("sampler", "seed_balance")
class SeedBalanceSampler(SamplerBase):
    def sampler(self, size, num_replicas, rank, seed, costs, batch_size):
        return _PrefixSampler([int(c) for c in costs], num_replicas)


@register("batching", "uneven")
class UnevenBatching(BatchingBase):
    def batch_sampler(self, sampler, batch_size, *, rank, **_context):
        return BatchSampler(sampler, max(1, batch_size // 2) if rank == 0 else batch_size, drop_last=False)
