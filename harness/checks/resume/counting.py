"""Pure: what a mid-epoch stop and resume did to an epoch's order, from recorded orders alone.

``reference`` is the uninterrupted epoch (the sample indices in the order a loader delivered them),
``before`` what the stopped loader delivered, ``after`` what the resumed loader delivered until the
epoch's end. The counts are over multisets, because a distributed sampler's epoch repeats a few
indices as padding: a sample counts as repeated each time it was delivered more often than the
uninterrupted epoch delivers it, and as dropped each time it was delivered less often.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class ResumeCount:
    expected: int  # samples of the uninterrupted epoch
    before: int  # samples delivered before the stop
    after: int  # samples delivered after the resume, until the epoch's end
    repeated: int  # deliveries beyond the uninterrupted epoch's count of that sample
    dropped: int  # deliveries the uninterrupted epoch has and the stopped + resumed one lacks
    same_order: bool  # before + after is the uninterrupted epoch, position for position

    def as_dict(self) -> dict:
        return asdict(self)


def count(reference: Sequence[int], before: Sequence[int], after: Sequence[int]) -> ResumeCount:
    """The repeated and dropped samples of ``before + after`` against ``reference``."""
    want, got = Counter(reference), Counter(before) + Counter(after)
    repeated = sum(max(0, n - want[i]) for i, n in got.items())
    dropped = sum(max(0, n - got[i]) for i, n in want.items())
    joined = list(before) + list(after)
    return ResumeCount(len(reference), len(before), len(after), repeated, dropped, joined == list(reference))
