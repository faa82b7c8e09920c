"""Where a rank's training steps get their batches: the cell's pipeline across epochs, or a few
real batches held in memory (the pipeline with data loading taken out, for the compute-only phase
of --decompose).

With device preprocessing the pipeline's DevicePrep fills in each batch's pixel counts here, on the
rank. With side_stream (CUDA only; a no-op on an emulated device) the source works one batch ahead,
as apex's data_prefetcher: when it hands over batch k it takes batch k+1 from the loader and starts
its copy on a side CUDA stream, which overlaps the step of batch k; the step's stream waits for
that copy before using it. The wait for batch k+1 is then counted in step k (the total wait is
unchanged).

The stage accounts of the batches handed to training (harness.train.stagetimer) are kept in order,
in `consumed.stages` (StageLog): the rank's record takes those of its window's batches from
there."""
from __future__ import annotations

import queue
import threading
import time

import torch

from harness.train.pipeline import Pipeline
from harness.train.stagetimer import STAGE_KEY, timed_total

TENSOR_KEYS = ("images", "tokens", "image_emb", "text_emb")


class BatchSource:
    """This rank's batches across epochs; None once its epoch is over, until every rank's is."""

    def __init__(self, pipe: Pipeline, device=None):
        self.pipe = pipe
        self.epoch = 0
        self.completed_epochs = 0
        self._it = None
        self._exhausted = False
        self.consumed = ConsumedIndices()
        self._side = SideStream(device) if pipe.side_stream and device is not None else None
        # An emulated rank receives from its workers in a thread, one batch ahead, while the modelled step
        # runs: what the DataLoader's pin-memory thread does on a GPU (pin_memory=True), where the host is
        # free while the GPU computes. Inline, the unpickling and shared-memory mapping of each batch (about
        # 1 ms for 3 tensors) counted as a data stall on every step, which no real GPU loop pays.
        emulated = device is not None and getattr(device, "emulated", False)
        workers = getattr(getattr(pipe, "loader", None), "num_workers", 0)  # a DataLoader's; 0 in-rank loading
        self._ahead = ReceiveAhead(self._fetch) if emulated and workers > 0 else None

    def _fetch(self) -> dict | None:
        if self._it is None:
            self.pipe.sampler.set_epoch(self.epoch)
            self._it = iter(self.pipe.loader)
        start = time.thread_time()
        try:
            batch = next(self._it)
        except StopIteration:
            return None
        receive_s = time.thread_time() - start
        account = batch.get(STAGE_KEY)
        if account is not None:  # the rank's side of the hand-over (inline: less the stages it ran itself)
            inline = account.get("tid") == threading.get_ident()
            account["receive"] = max(0.0, receive_s - (timed_total(account) if inline else 0.0))
        if self.pipe.devprep is not None:
            self.pipe.devprep.annotate(batch)
        return batch

    def next(self) -> dict | None:
        if self._exhausted:
            return None
        if self._side is not None:
            batch = self._side.take(self._fetch)
        elif self._ahead is not None:
            batch = self._ahead.take()
        else:
            batch = self._fetch()
        if batch is None:
            self._exhausted = True
            return None
        self.consumed.setdefault(self.epoch, []).extend(batch["index"].tolist())
        self.consumed.stages.append(batch.get(STAGE_KEY), len(batch["index"]))
        return batch

    def loader_thread_cpu_s(self) -> float:
        return self.pipe.loader_thread_cpu_s()

    def new_epoch(self) -> None:
        if self._ahead is not None:
            self._ahead.stop()  # it has seen the epoch's end: nothing of the next epoch was taken
        self._it, self._exhausted = None, False
        if self._side is not None:
            self._side.reset()
        self.epoch += 1
        self.completed_epochs += 1

    def close(self) -> None:
        """Drop the DataLoader iterator, which shuts its workers down."""
        if self._ahead is not None:
            self._ahead.stop()
        self._it = None


# the rank's wait for its next batch under --profile, named as a DataLoader iteration: torch-tb-profiler's step
# breakdown counts such events as the step's DataLoader time (with ReceiveAhead the DataLoader's own __next__
# runs in the receiving thread, where the plugin does not look)
WAIT_EVENT = "enumerate(DataLoader)#ReceiveAhead.__next__"


class ReceiveAhead:
    """`fetch` called in a thread, one batch ahead of take(); None (the epoch's end) ends the
    thread until the next take() starts it again. stop() waits for the batch in flight, so the
    iterator is never shared. Under the profiler the rank's wait in take() is an event the plugin
    counts as DataLoader time."""

    def __init__(self, fetch):
        self.fetch = fetch
        self._queue: queue.Queue = queue.Queue(maxsize=1)
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                batch = self.fetch()
            except BaseException as err:  # noqa: BLE001 - handed to take(), raised in the rank's thread
                self._queue.put(err)
                return
            self._queue.put(batch)
            if batch is None:
                return

    def take(self) -> dict | None:
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="receive-ahead", daemon=True)
            self._thread.start()
        if torch.autograd._profiler_enabled():  # --profile: the wait, named as TensorBoard's plugin counts it
            with torch.profiler.record_function(WAIT_EVENT):
                item = self._queue.get()
        else:
            item = self._queue.get()
        if isinstance(item, BaseException):
            self._thread = None
            raise item
        if item is None:
            self._thread.join()
            self._thread = None
        return item

    def stop(self) -> None:
        if self._thread is None:
            return
        self._stop.set()
        while self._thread.is_alive():  # unblock its put(); it ends after the batch in flight
            try:
                self._queue.get(timeout=0.1)
            except queue.Empty:
                pass
        self._thread = None
        while not self._queue.empty():
            self._queue.get_nowait()


class StageLog:
    """The stage accounts of the batches a rank handed to training, in order (None: a batch without
    one)."""

    def __init__(self):
        self.accounts: list[dict | None] = []
        self.sizes: list[int] = []

    def append(self, account: dict | None, samples: int) -> None:
        self.accounts.append(account)
        self.sizes.append(samples)

    def last(self, batches: int) -> list[dict | None]:
        """The accounts of the last `batches` batches (the measured window's, the window being the
        end)."""
        return self.accounts[len(self.accounts) - batches:] if batches > 0 else []


class ConsumedIndices(dict):
    """The indices read per epoch (epoch -> indices), with the stage accounts of the batches
    (`stages`)."""

    def __init__(self):
        super().__init__()
        self.stages = StageLog()


class InMemoryBatches:
    """A few real batches held in memory and replayed: the pipeline with data loading taken out."""

    def __init__(self, batches: list[dict]):
        self.batches = batches
        self.i = 0
        self.epoch = self.completed_epochs = 0
        self.consumed: dict[int, list[int]] = {}

    def next(self) -> dict:
        batch = self.batches[self.i % len(self.batches)]
        self.i += 1
        return batch

    def new_epoch(self) -> None:  # never reached: next() never runs dry
        pass

    def loader_thread_cpu_s(self) -> float:
        return 0.0

    def close(self) -> None:
        self.batches = []


def collect_batches(pipe: Pipeline, n: int) -> list[dict]:
    """Up to n batches from the pipeline (across epochs if one is shorter); its workers stop
    afterwards."""
    source, out = BatchSource(pipe), []
    while len(out) < n:
        batch = source.next()
        if batch is None:
            if not out:
                break
            source.new_epoch()
            continue
        out.append(batch)
    source.close()
    return out


class SideStream:
    """One batch ahead, its tensors copied on a side CUDA stream (see the module's docstring)."""

    def __init__(self, device):
        import torch

        self.device, self.stream = device, torch.cuda.Stream(device.torch_device)
        self._ahead: dict | None = None
        self._started = False

    def _copy(self, batch: dict | None) -> dict | None:
        import torch

        if batch is not None:
            with torch.cuda.stream(self.stream):
                batch["_device"] = {k: batch[k].to(self.device.torch_device, non_blocking=True)
                                    for k in TENSOR_KEYS if k in batch}
                batch["_copied"] = torch.cuda.Event()
                batch["_copied"].record(self.stream)  # this batch's copy only: the next one may still run
        return batch

    def take(self, fetch) -> dict | None:
        """Batch k (already copying), and start batch k+1's copy."""
        batch = self._ahead if self._started else self._copy(fetch())
        self._started = True
        self._ahead = self._copy(fetch()) if batch is not None else None
        return batch

    def reset(self) -> None:
        self._ahead, self._started = None, False


def to_device(batch: dict, device) -> dict:
    """The batch's tensors copied to the device (synchronised, so the copy is timed by the caller).
    A batch a SideStream already copied is only waited for (its own copy's event: the next batch's
    copy, started on the side stream, goes on during the step), and its tensors are marked as used
    by the step's stream so the allocator does not reuse them early."""
    if "_device" in batch:
        import torch

        tensors = batch["_device"]
        current = torch.cuda.current_stream(device.torch_device)
        for t in tensors.values():
            t.record_stream(current)
        current.wait_event(batch["_copied"])  # the step's kernels start after this batch's copy
        device.wait_event(batch["_copied"])  # and the host waits for it alone (timed as h2d), not the next one's
        return tensors
    tensors = {k: batch[k].to(device.torch_device, non_blocking=True) for k in TENSOR_KEYS if k in batch}
    device.synchronize()
    return tensors
