"""Fixed batches of the scenario's batch size, as torch's BatchSampler makes them."""
from __future__ import annotations

from torch.utils.data import BatchSampler

from strategies.protocols import BatchingBase
from strategies.registry import register


@register("batching", "fixed")
class FixedBatching(BatchingBase):
    def batch_sampler(self, sampler, batch_size: int, **_context) -> BatchSampler:
        return BatchSampler(sampler, batch_size, drop_last=False)
