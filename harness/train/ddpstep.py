"""One training step on one rank: forward, backward (with DDP's gradient allreduce) and optimizer
step.

The failure policy lives here, and its rule is that every rank makes the same collective calls
whatever fails where (a rank that skipped or repeated one would hang its peers in NCCL):
- forward: nothing collective has happened (DDP is built with broadcast_buffers=False, so a
  BatchNorm model broadcasts no buffers in forward). When a batch does not fit and the batching
  allows it (splits_on_oom), it is split into 2, 4, 8... micro-batches whose gradients accumulate
  locally (no_sync) before the last one joins the allreduce; the gradients equal the whole batch's.
  The emulated device knows in advance what fits; on a real GPU each split is tried until one runs.
  Without splitting, StepFailed("forward") reaches the caller, which joins the peers' allreduce
  with a shadow step.
- backward: some gradient buckets are already reduced. The rank finishes the reduction with a
  zero-weight backward over the parameters whose gradients had not arrived (finish_reduction), then
  takes the optimizer step, so its replica stays identical; the batch's gradient is lost on that
  rank. With splitting that is one OOM event and training goes on; without, StepFailed("backward")
  (joined).
- optimizer step: the allreduce is done; splitting cannot help; StepFailed("optimizer step")
  (joined).
An out-of-memory is torch.OutOfMemoryError or a cuBLAS/cuDNN allocation failure (a plain
RuntimeError); any other error in a phase is a StepFailed too (not oom), handled the same way, so
one rank's failure ends the cell on every rank at the next agreement instead of killing that rank
mid-step. A distributed-backend error (torch.distributed.DistBackendError, whatever its text: NCCL
reports a failed launch as "Cuda failure 'out of memory'", or a peer's departure) is never an OOM:
the communicator is broken, so neither splitting nor finish_reduction can help; the rank aborts its
process group (harness.train.agreement.abort_group) and ends. So does a finish_reduction or a
shadow step that fails: the collective sequence cannot be mended.

OOM events (train_step's return): a step in which an OOM was raised, or on the emulated device a
step split ahead because the modelled GPU would raise at that size. A step a CUDA device splits
ahead from its probe's plan or from its memory of an earlier OOM (CudaDevice.note_oom) raised
nothing: it is not an event.

Precision: a StepPrecision runs forward under autocast (float16 or bfloat16) and, for float16,
scales the loss with a GradScaler. Only on CUDA: the emulated device's stand-in runs fp32 on the
CPU whatever the precision strategy (its precision changes the modelled time and memory only).
None: plain fp32. GradScaler's inf check reads a GPU tensor (.item()), so the host waits for the
GPU there: the step makes that wait the device's own synchronize (after unscale_, before the
check), so its spin is counted as a wait for the device, not as the rank's CPU
(harness.device.devices.WaitClock).
"""
from __future__ import annotations

import inspect
from contextlib import nullcontext

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from harness.train.agreement import abort_group


class StepPrecision:
    """Autocast and loss scaling of one cell on one device (a precision strategy applied)."""

    def __init__(self, strategy, cuda: bool):
        self.cuda = cuda
        self.dtype = getattr(torch, strategy.autocast_dtype) if cuda and strategy.autocast_dtype else None
        self.label = strategy.autocast_dtype or ("tf32" if strategy.tf32 else "fp32")
        if not cuda:  # the stand-in runs fp32 on the CPU; the precision only picks the modelled rate
            self.label = f"{strategy.rate} (modelled; stand-in fp32 on CPU)"
        if cuda:
            torch.backends.cuda.matmul.allow_tf32 = bool(strategy.tf32)
            torch.backends.cudnn.allow_tf32 = bool(strategy.tf32)
        self.scaler = torch.amp.GradScaler("cuda") if cuda and strategy.grad_scaler else None

    @staticmethod
    def unsupported(strategy, torch_device) -> str | None:
        """Why this GPU cannot run the precision natively, or None. bfloat16 needs compute
        capability 8.0 (Ampere): torch.cuda.is_bf16_supported() says True on a V100 too, where bf16
        is emulated (slow, or raising inside a step). The cell is then recorded as unsupported
        instead of run."""
        if strategy.autocast_dtype != "bfloat16" or torch_device.type != "cuda":
            return None
        major, minor = torch.cuda.get_device_capability(torch_device)
        if major >= 8 and torch.cuda.is_bf16_supported(including_emulation=False):
            return None
        return (f"bf16 needs compute capability 8.0 or later; {torch.cuda.get_device_name(torch_device)} has "
                f"{major}.{minor} (bf16 would be emulated)")

    def autocast(self):
        return torch.autocast("cuda", dtype=self.dtype) if self.dtype is not None else nullcontext()

    def backward(self, loss: torch.Tensor) -> None:
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()

    def step(self, optimizer, wait=None) -> None:
        """The optimizer step; with loss scaling, `wait` (the device's synchronize) runs between
        unscale_ and the inf check, where the host would otherwise wait for the GPU inside
        .item()."""
        if self.scaler is None:
            optimizer.step()
            return
        self.scaler.unscale_(optimizer)
        if wait is not None:
            wait()
        self.scaler.step(optimizer)  # skipped when the scaled gradients overflowed, as AMP does
        self.scaler.update()


FP32 = None  # no StepPrecision: forward and backward in fp32


OOM_MARKERS = ("out of memory", "CUBLAS_STATUS_ALLOC_FAILED", "CUDNN_STATUS_ALLOC_FAILED",
               "CUDNN_STATUS_NOT_INITIALIZED", "CUFFT_ALLOC_FAILED", "NVJPEG_STATUS_ALLOCATOR_FAILURE")


# what gloo and NCCL say when the communicator broke (a peer gone, an aborted communicator)
BACKEND_MARKERS = ("Connection closed by peer", "Connection reset by peer", "NCCL communicator was aborted",
                   "NCCL error")


def is_backend_error(err: BaseException) -> bool:
    """A distributed-backend error: the process group cannot be trusted for another collective."""
    return isinstance(err, dist.DistError) or (
        isinstance(err, RuntimeError) and any(m in str(err) for m in BACKEND_MARKERS))


def is_oom(err: BaseException) -> bool:
    """torch.OutOfMemoryError, or a CUDA library's allocation failure that torch raises as
    RuntimeError; never a distributed-backend error (NCCL's "Cuda failure 'out of memory'" is
    one)."""
    if is_backend_error(err):
        return False
    return isinstance(err, torch.OutOfMemoryError) or (
        isinstance(err, RuntimeError) and any(m in str(err) for m in OOM_MARKERS))


def _broken(phase: str, err: BaseException | str) -> Exception:
    """The error a rank raises after aborting its group: `phase` left the collective sequence
    broken."""
    text = err if isinstance(err, str) else f"{type(err).__name__}: {err}"
    return abort_group(f"{phase}: {text}")


class StepFailed(RuntimeError):
    """A phase of the step failed on this rank and splitting could not absorb it. `joined`: this
    rank has already made the step's gradient allreduce whole (backward, optimizer step); else the
    caller must."""

    def __init__(self, phase: str, err: BaseException | str, oom: bool, joined: bool):
        super().__init__(err if isinstance(err, str) else f"{type(err).__name__}: {err}")
        self.phase, self.oom, self.joined = phase, oom, joined

    @property
    def reason(self) -> str:
        return f"{'OOM' if self.oom else 'error'} in the {self.phase}: {self}"


class GradArrivals:
    """Which parameters' gradients arrived in the current backward (post-accumulate-grad hooks):
    after an error mid-backward, the others are the ones DDP still waits for."""

    def __init__(self, module: torch.nn.Module):
        self.params = [p for p in module.parameters() if p.requires_grad]
        self.arrived: set[int] = set()
        for p in self.params:
            p.register_post_accumulate_grad_hook(self._arrive)

    def _arrive(self, p: torch.Tensor) -> None:
        self.arrived.add(id(p))

    def begin(self) -> None:
        self.arrived.clear()

    def pending(self) -> list[torch.Tensor]:
        return [p for p in self.params if id(p) not in self.arrived]


def arrivals_of(ddp) -> GradArrivals:
    """The GradArrivals of a DDP-wrapped module, made on first use."""
    tracker = getattr(ddp, "_dlbench_arrivals", None)
    if tracker is None:
        tracker = GradArrivals(getattr(ddp, "module", ddp))  # a bare module (the unit tests) tracks itself
        ddp._dlbench_arrivals = tracker
    return tracker


def finish_reduction(ddp) -> None:
    """After a backward that failed part-way: a zero-weight backward over the parameters whose
    gradients had not arrived, so that DDP launches their buckets' allreduce in order and the
    peers' allreduce completes (their gradients then average in zeros for this rank's missing
    part)."""
    pending = arrivals_of(ddp).pending()
    if not pending:
        return
    try:
        torch.autograd.backward([sum((p * 0).sum() for p in pending)])
    except Exception as err:  # noqa: BLE001 - the peers wait in an allreduce this rank cannot complete
        raise _broken("finish_reduction failed", err) from None


def _forward(ddp, tensors: dict, precision: StepPrecision | None) -> torch.Tensor:
    with precision.autocast() if precision is not None else nullcontext():
        return ddp(tensors)


def _backward(loss: torch.Tensor, precision: StepPrecision | None) -> None:
    precision.backward(loss) if precision is not None else loss.backward()


def _step(optimizer, precision: StepPrecision | None, device=None) -> None:
    if precision is None:
        optimizer.step()
        return
    precision.step(optimizer, wait=device.synchronize if device is not None else None)


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def micro_batches_needed(device, samples: int, per_sample_pixels: int) -> int:
    """The fewest micro-batches (a power of two) the device says fit; above `samples` if none
    does."""
    parts = 1
    while parts <= samples and not device.fits(_ceil_div(samples, parts),
                                               _ceil_div(samples, parts) * per_sample_pixels):
        parts *= 2
    return parts


def split(tensors: dict, samples: int, parts: int) -> list[dict]:
    """The batch cut along its first dimension into `parts` micro-batches (the last may be
    smaller)."""
    size = _ceil_div(samples, parts)
    return [{k: v[i:i + size] for k, v in tensors.items()} for i in range(0, samples, size)]


def _synced_pass(ddp, device, tensors: dict, samples: int, padded_pixels: int, weight: float,
                 precision: StepPrecision | None) -> tuple[str, str] | None:
    """Forward and backward that joins the gradient allreduce. Returns None, or (phase, message) of
    an OOM: "forward" (before anything collective: may be retried smaller) or "backward" (part-way
    through the allreduce, which was then finished with zeros). Any other error raises StepFailed,
    `joined` as the phase left it."""
    arrivals_of(ddp).begin()
    try:
        device.begin_step(samples, padded_pixels)
        loss = _forward(ddp, tensors, precision) * weight
    except Exception as err:  # noqa: BLE001 - classified: an OOM goes to the policy, the rest ends the cell
        if is_backend_error(err):
            raise _broken("a distributed-backend error in the forward", err) from None
        if not is_oom(err):
            raise StepFailed("forward", err, oom=False, joined=False) from None
        return "forward", str(err)
    error = oom = None
    backend = False
    try:
        _backward(loss, precision)
    except Exception as err:  # noqa: BLE001
        error, oom = f"{type(err).__name__}: {err}", is_oom(err)  # a string: the traceback goes with err
        backend = is_backend_error(err)
    loss = None  # noqa: F841 - released with the exception, before the reduction is finished
    if error is None:
        return None
    if backend:  # the communicator is broken: finish_reduction would wait on it
        raise _broken("a distributed-backend error in the backward", error)
    finish_reduction(ddp)
    device.empty_cache()
    if not oom:
        raise StepFailed("backward", error, oom=False, joined=True)
    return "backward", error


def _optimizer_step(optimizer, precision: StepPrecision | None, device=None) -> None:
    try:
        _step(optimizer, precision, device)
    except Exception as err:  # noqa: BLE001
        raise StepFailed("optimizer step", err, oom=is_oom(err), joined=True) from None


def accumulate(ddp, device, parts: list[dict], samples: int, per_sample_pixels: int,
               precision: StepPrecision | None = FP32) -> tuple[str, str] | None:
    """Forward and backward of each micro-batch, its loss weighted by its share of the batch;
    gradients accumulate locally (no_sync) and the last micro-batch's backward joins the allreduce.
    Returns None, ("forward", message) (an OOM before the allreduce: retry smaller) or what
    _synced_pass returned."""
    for i, part in enumerate(parts):
        n = len(next(iter(part.values())))
        if i == len(parts) - 1:
            return _synced_pass(ddp, device, part, n, n * per_sample_pixels, n / samples, precision)
        try:
            with ddp.no_sync():
                device.begin_step(n, n * per_sample_pixels)
                _backward(_forward(ddp, part, precision) * (n / samples), precision)
        except Exception as err:  # noqa: BLE001 - nothing collective happened under no_sync
            if is_backend_error(err):
                raise _broken("a distributed-backend error in a micro-batch", err) from None
            if not is_oom(err):
                raise StepFailed("forward", err, oom=False, joined=False) from None
            return "forward", str(err)
        device.pad()
    return None


def _split_step(ddp, optimizer, device, tensors: dict, samples: int, per_sample_pixels: int,
                parts: int, precision: StepPrecision | None = FP32) -> bool:
    """Accumulate over `parts` micro-batches, doubling them after each OOM before the allreduce,
    then step. An OOM in the last micro-batch's backward (the allreduce begun) keeps the finished
    reduction. Returns whether an OOM was raised."""
    raised = False
    while True:
        if parts > samples:
            raise StepFailed("forward", "a single sample does not fit the device", oom=True, joined=False)
        optimizer.zero_grad(set_to_none=True)
        failed = accumulate(ddp, device, split(tensors, samples, parts), samples, per_sample_pixels, precision)
        raised |= failed is not None
        if failed is None or failed[0] == "backward":
            break
        device.note_oom(_ceil_div(samples, parts), _ceil_div(samples, parts) * per_sample_pixels)
        parts *= 2
        device.empty_cache()  # only after a real OOM: a planned split needs no emptied cache
    _optimizer_step(optimizer, precision, device)
    return raised


def split_ahead_is_event(device) -> bool:
    """Whether a split decided before the step ran stands for a raised OOM: on the emulated device,
    yes (the modelled GPU raises at that size every time); on a device that plans from a measured
    memory model or remembers an OOM that already counted (CUDA's, oominject's CudaLikeDevice), no:
    nothing raised."""
    return getattr(device, "memory_model", None) is None and getattr(device, "oom_units", None) is None


def train_step(ddp, optimizer, device, tensors: dict, samples: int, padded_pixels: int,
               split_on_oom: bool, precision: StepPrecision | None = FP32) -> int:
    """One step on the batch; returns its OOM events (module docstring: 1 if an OOM was raised in
    it, or on the emulated device it was split ahead; else 0). Raises StepFailed when the policy
    says the cell ends; `joined` then says whether this rank already completed the step's
    allreduce."""
    optimizer.zero_grad(set_to_none=True)
    per_sample = padded_pixels // max(samples, 1)
    parts = micro_batches_needed(device, samples, per_sample)
    foreseen = parts > 1 and split_ahead_is_event(device)
    if parts == 1 or not split_on_oom:
        failed = _synced_pass(ddp, device, tensors, samples, padded_pixels, 1.0, precision)
        if failed is None:
            _optimizer_step(optimizer, precision, device)
            return 0
        device.note_oom(samples, padded_pixels)
        phase, message = failed
        if phase == "backward":
            _optimizer_step(optimizer, precision, device)  # the replica stays identical to its peers'
            if not split_on_oom:
                raise StepFailed("backward", message, oom=True, joined=True)
            return 1
        if not split_on_oom:
            raise StepFailed("forward", message, oom=True, joined=False)
        parts, foreseen = 2, True  # the whole batch raised
        device.empty_cache()
    raised = _split_step(ddp, optimizer, device, tensors, samples, per_sample, parts, precision)
    return int(foreseen or raised)


def make_ddp(model: torch.nn.Module, **options) -> DDP:
    """The DDP wrapper every cell trains with. broadcast_buffers=False: a BatchNorm model would
    broadcast its buffers in every forward, and a forward retried after an OOM (or split) on one
    rank would break the collective sequence; each replica keeps its own running statistics (as
    SyncBatchNorm-free DDP training commonly does). gradient_as_bucket_view: the gradients live in
    DDP's buckets, no second copy."""
    if "forward_sync_buffers" in inspect.signature(DDP.__init__).parameters:  # torch >= 2.13 spells it so
        options.setdefault("forward_sync_buffers", False)
    else:
        options.setdefault("broadcast_buffers", False)
    return DDP(model, gradient_as_bucket_view=True, **options)


def tiny(tensors: dict, samples: int = 2) -> dict:
    """A batch's first samples (images cropped to 32x32): what a shadow step after an OOM feeds the
    model, small enough to fit where the batch did not (BatchNorm needs more than one sample)."""
    out = {k: v[:samples] for k, v in tensors.items()}
    if "images" in out and out["images"].dim() == 4:
        out["images"] = out["images"][:, :, :32, :32]
    return out


def shadow_step(ddp, optimizer, device, tensors: dict, precision: StepPrecision | None = FP32) -> None:
    """A zero-weight step for a rank without data, so the others' gradient allreduce completes:
    always on a tiny batch (a whole batch that needed splitting after an OOM would run out again).
    If it fails, the peers wait in an allreduce this rank cannot join: the group is aborted
    (GroupAborted)."""
    try:
        optimizer.zero_grad(set_to_none=True)
        arrivals_of(ddp).begin()
        device.begin_step(0, 0)
        _backward(_forward(ddp, tiny(tensors), precision) * 0.0, precision)
        _step(optimizer, precision, device)
    except Exception as err:  # noqa: BLE001 - nothing can mend the collective sequence now
        raise _broken("the shadow step failed", err) from None
