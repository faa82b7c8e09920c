"""What the ranks agree on: per-step flags (one small allreduce), the measured window's length, and
whether DDP kept every replica's parameters identical."""
from __future__ import annotations

import hashlib

import torch
import torch.distributed as dist


def agree(*values: int) -> list[int]:
    """The maximum of each integer over all ranks (one allreduce; on the GPU where NCCL needs it). A world
    of one rank has nobody to agree with: no collective."""
    if dist.get_world_size() == 1:
        return list(values)
    on = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else None
    t = torch.tensor(values, dtype=torch.int64, device=on)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.tolist()


def window_steps(training, batches_per_epoch: int) -> int:
    """Measured steps: --steps, or --epochs worth of the longest rank's batches, agreed by all ranks."""
    return agree(training.steps or training.epochs * batches_per_epoch)[0]


def param_digest(model: torch.nn.Module) -> str:
    """A hash of every parameter's bytes: equal on all ranks iff DDP kept the replicas identical."""
    h = hashlib.sha1()
    for p in model.parameters():
        h.update(p.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()
