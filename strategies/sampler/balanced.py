"""Cost-balanced distributed sampler: at every global step each rank gets an equal-cost share.

In synchronous DDP the slowest rank sets every step's time. DistributedSampler deals the shuffled
indices out by stride, so one rank can draw several expensive samples (large images) in the same
step while the others wait. This sampler shuffles and pads exactly as
DistributedSampler(drop_last=False) does, cuts the padded permutation into global steps of
``num_replicas * batch_size`` indices (the last step may be shorter) and, within each step, assigns
indices to ranks longest-processing-time first: costliest first, each to the least-loaded rank that
still has room (ties to the lowest rank). Every rank gets exactly ``len(step) / num_replicas``
indices of every step, hence ``total_size / num_replicas`` in all and the same number of fixed
batches; its k-th ``batch_size`` slice is its share of step k.

Unlike the first article's ``DistributedSamplerWithBalance``, which gave every rank the same
unshuffled prefix of the dataset, stopped after ~1/world of it, ignored rank, epoch and ``__len__``
and loaded every image in ``__init__`` to weigh it, this keeps DistributedSampler's contract: every
index once per epoch across ranks (plus the same padding), equal lengths, order a pure function of
(seed, epoch).

Balance guarantee per step (LPT): max rank cost <= mean rank cost + the largest single cost in the
step.
"""
from __future__ import annotations

import heapq
import math
from collections.abc import Iterator

import numpy as np
import torch

from strategies.params import choice
from strategies.protocols import SamplerBase
from strategies.registry import register
from strategies.sampler.epochs import DistributedEpochs


def padded_permutation(size: int, total_size: int, seed: int, epoch: int) -> list[int]:
    """DistributedSampler's shuffled, padded index list (drop_last=False), bit for bit."""
    g = torch.Generator()
    g.manual_seed(seed + epoch)
    indices = torch.randperm(size, generator=g).tolist()
    pad = total_size - len(indices)
    if pad <= len(indices):
        indices += indices[:pad]
    else:
        indices += (indices * math.ceil(pad / len(indices)))[:pad]
    return indices


def lpt_assign(costs: np.ndarray, num_replicas: int) -> np.ndarray:
    """Rank of each position: costliest first to the least-loaded rank with room (equal counts).

    ``len(costs)`` must be a multiple of ``num_replicas``. Ties: earlier position first, lower rank
    first.
    """
    share = len(costs) // num_replicas
    ranks = np.empty(len(costs), dtype=np.int64)
    heap = [(0.0, r) for r in range(num_replicas)]
    count = [0] * num_replicas
    for p in np.argsort(-costs, kind="stable"):
        load, r = heapq.heappop(heap)
        ranks[p] = r
        count[r] += 1
        if count[r] < share:
            heapq.heappush(heap, (load + float(costs[p]), r))
    return ranks


class BalancedDistributedSampler(DistributedEpochs):
    def __init__(self, size: int, num_replicas: int, rank: int, seed: int, costs: np.ndarray,
                 batch_size: int) -> None:
        super().__init__(size, num_replicas, rank, seed)
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.costs = np.asarray(costs, dtype=np.float64)
        if self.costs.shape != (size,):
            raise ValueError(f"costs has shape {self.costs.shape}, expected ({size},)")
        self.batch_size = batch_size

    def __iter__(self) -> Iterator[int]:
        indices = padded_permutation(self.size, self.total_size, self.seed, self.epoch)
        step = self.num_replicas * self.batch_size
        for start in range(0, self.total_size, step):
            block = indices[start:start + step]
            ranks = lpt_assign(self.costs[block], self.num_replicas)
            # this rank's share, in the (random) order of the permutation
            for p in np.flatnonzero(ranks == self.rank):
                yield block[p]


@register("sampler", "balanced")
class BalancedSampler(SamplerBase):
    """``cost``: which per-sample cost the harness passes ("auto", "pixels" or "bytes"); unused
    here."""

    def __init__(self, cost: str = "auto") -> None:
        self.cost = choice("cost", cost, ("auto", "pixels", "bytes"))

    def sampler(self, size: int, num_replicas: int, rank: int, seed: int, costs: np.ndarray,
                batch_size: int) -> BalancedDistributedSampler:
        return BalancedDistributedSampler(size, num_replicas, rank, seed, costs, batch_size)
