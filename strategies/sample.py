"""The unit of data every storage reads and writes."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

IMAGE_EMB_DIM = 2048
TEXT_EMB_DIM = 768
FIELDS = ("jpeg", "caption", "image_emb", "text_emb")


@dataclass(slots=True)
class Sample:
    """One CC3M-like image-text pair. Fields a reader was not asked for are None.

    A reader may return the embeddings of one batch as rows of one buffer (one allocation per batch
    and field, not per sample): each sample's rows are its own, but a sample kept longer than its
    batch keeps that buffer alive. :meth:`detached` returns a copy whose arrays own their memory.
    """

    index: int
    jpeg: bytes | None = None
    caption: str | None = None
    image_emb: np.ndarray | None = None  # float32[2048]
    text_emb: np.ndarray | None = None  # float32[768]

    @property
    def nbytes(self) -> int:
        """Logical bytes this sample carries (what a reader delivered)."""
        n = 0
        if self.jpeg is not None:
            n += len(self.jpeg)
        if self.caption is not None:
            n += len(self.caption.encode("utf-8"))
        for arr in (self.image_emb, self.text_emb):
            if arr is not None:
                n += arr.nbytes
        return n

    def detached(self) -> Sample:
        """A copy whose arrays own their memory (for a cache that keeps single samples of a
        batch)."""
        return Sample(self.index, self.jpeg, self.caption,
                      None if self.image_emb is None else self.image_emb.copy(),
                      None if self.text_emb is None else self.text_emb.copy())

    def same_as(self, other: Sample) -> bool:
        """Field-by-field equality (numpy arrays compared exactly)."""
        if self.index != other.index or self.jpeg != other.jpeg or self.caption != other.caption:
            return False
        for a, b in ((self.image_emb, other.image_emb), (self.text_emb, other.text_emb)):
            if (a is None) != (b is None):
                return False
            if a is not None and not np.array_equal(a, b):
                return False
        return True
