"""Where a rank's training steps get their batches: the cell's pipeline across epochs, or a few real batches
held in memory (the pipeline with data loading taken out, for the compute-only phase of --decompose)."""
from __future__ import annotations

from harness.pipeline import Pipeline

TENSOR_KEYS = ("images", "tokens", "image_emb", "text_emb")


class BatchSource:
    """This rank's batches across epochs; None once its epoch is over, until every rank's is."""

    def __init__(self, pipe: Pipeline):
        self.pipe = pipe
        self.epoch = 0
        self.completed_epochs = 0
        self._it = None
        self._exhausted = False
        self.consumed: dict[int, list[int]] = {}

    def next(self) -> dict | None:
        if self._exhausted:
            return None
        if self._it is None:
            self.pipe.sampler.set_epoch(self.epoch)
            self._it = iter(self.pipe.loader)
        try:
            batch = next(self._it)
        except StopIteration:
            self._exhausted = True
            return None
        self.consumed.setdefault(self.epoch, []).extend(batch["index"].tolist())
        return batch

    def new_epoch(self) -> None:
        self._it, self._exhausted = None, False
        self.epoch += 1
        self.completed_epochs += 1

    def close(self) -> None:
        """Drop the DataLoader iterator, which shuts its workers down."""
        self._it = None


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

    def close(self) -> None:
        self.batches = []


def collect_batches(pipe: Pipeline, n: int) -> list[dict]:
    """Up to n batches from the pipeline (across epochs if one is shorter); its workers stop afterwards."""
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


def to_device(batch: dict, device) -> dict:
    """The batch's tensors copied to the device (synchronised, so the copy is timed by the caller)."""
    tensors = {k: batch[k].to(device.torch_device, non_blocking=True) for k in TENSOR_KEYS if k in batch}
    device.synchronize()
    return tensors
