"""What the ranks agree on: per-step flags (one small allreduce), the measured window's length, and
whether DDP kept every replica's parameters identical; and how a rank leaves the group after an
error that broke the collective sequence (abort_group, GroupAborted), or ends it (end_group)."""
from __future__ import annotations

import hashlib
from datetime import timedelta

import torch
import torch.distributed as dist

STEP_TIMEOUT = timedelta(seconds=300)  # an agreement's wait on the host group (whose own timeout is hours)


def agree(*values: int, group=None, timeout: timedelta = STEP_TIMEOUT) -> list[int]:
    """The maximum of each integer over all ranks (one allreduce). On `group` (the host's gloo
    group: the per-step agreement) a CPU tensor, so the host never waits for the GPU's stream
    there, waited for at most `timeout` (the host group's own timeout is hours, for host work; a
    hung peer must not hold a step that long); on the default group under NCCL a GPU tensor, whose
    .tolist() waits for the stream. A world of one rank has nobody to agree with: no collective."""
    if dist.get_world_size() == 1:
        return list(values)
    nccl = group is None and dist.get_backend() == "nccl"
    t = torch.tensor(values, dtype=torch.int64, device=torch.device("cuda", torch.cuda.current_device())
                     if nccl else None)
    if group is None:
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
    else:
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group, async_op=True).wait(timeout=timeout)
    return t.tolist()


class GroupAborted(RuntimeError):
    """This rank aborted its process groups: it can make no further collective call, so it ends.
    Its peers fail at once where the backend notices a departed rank (gloo: the connection closes
    when the process exits) and are ended by the launcher's watch, or torchrun's agent, where it
    does not (NCCL)."""


def abort_group(reason: str) -> GroupAborted:
    """After an error that leaves the collective sequence broken (a failed shadow step or
    finish_reduction, a distributed-backend error): under NCCL every process group is aborted, so
    nothing in this process waits on the communicators' in-flight work (destroying them would).
    Under gloo nothing is done: the rank's exit closes its connections and the peers fail at once,
    while aborting or destroying a gloo group waits for its in-flight work up to the group's
    timeout (measured: 20 s of a 20 s timeout, either way). Returns the error to raise, whose text
    keeps the reason (the launcher reads the cause from it)."""
    if dist.is_initialized() and dist.get_backend() == "nccl":
        from torch.distributed.distributed_c10d import _abort_process_group

        try:
            _abort_process_group()
        except Exception:  # noqa: BLE001 - the rank's exit ends the communicators anyway
            pass
    return GroupAborted(f"{reason} (the process group was aborted)")


def end_group(failed: bool) -> None:
    """A rank's last call: destroy the process groups after a clean run; after an error abort them
    instead (abort_group), since destroying waits for in-flight collectives that a failed peer will
    never complete."""
    if not dist.is_initialized():
        return
    if failed:
        abort_group("the rank failed")
    else:
        dist.destroy_process_group()


def host_barrier(group=None) -> None:
    """A barrier on the host (gloo) group before a phase's first collective on the training group:
    a rank that died while the others built a pipeline or warmed the page cache is noticed by gloo
    at once, where an NCCL collective would wait for its watchdog. Nothing to wait for in a world
    of one."""
    if dist.get_world_size() > 1:
        dist.barrier(group=group)


def window_steps(training, batches_per_epoch: int) -> int:
    """Measured steps: --steps, or --epochs worth of the longest rank's batches, agreed by all
    ranks."""
    return agree(training.steps or training.epochs * batches_per_epoch)[0]


def param_digest(model: torch.nn.Module) -> str:
    """A hash of every parameter's bytes: equal on all ranks iff DDP kept the replicas
    identical."""
    h = hashlib.sha1()
    for p in model.parameters():
        h.update(p.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()
