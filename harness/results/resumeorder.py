"""Pure: what a mid-epoch stop and resume did to an epoch's order, from recorded orders alone.

``reference`` is the uninterrupted epoch (the sample indices in the order a loader delivered them),
``before`` what the stopped loader delivered, ``after`` what the resumed loader delivered until the epoch's
end. The counts are over multisets, because a distributed sampler's epoch repeats a few indices as padding:
a sample counts as repeated each time it was delivered more often than the uninterrupted epoch delivers it,
and as dropped each time it was delivered less often.
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


def _seconds(value, verified: bool = True) -> str:
    if value is None:
        return "-"
    return f"{value:.3f}" if verified else f"{value:.3f}?"


def table(rows: list[dict]) -> list[str]:
    """check-resume's rows as text lines: one per loader x storage x sampler x way of resuming."""
    head = (f"{'loader':<8} {'storage':<10} {'sampler':<15} {'resume':<8} {'first batch s warm':>18} "
            f"{'cold':>7} {'stop':>7} {'repeated':>8} {'dropped':>7} {'order':>6}  resumable state")
    out = [head]
    for r in rows:
        stop = f"{r['stop_batches']}/{r['epoch_batches']}"
        out.append(f"{r['loader']:<8} {r['storage']:<10} {r['sampler']:<15} {r['method']:<8} "
                   f"{_seconds(r['first_batch_warm_s']):>18} "
                   f"{_seconds(r['first_batch_cold_s'], r['cold_verified']):>7} {stop:>7} {r['repeated']:>8} "
                   f"{r['dropped']:>7} {'same' if r['same_order'] else 'moved':>6}  {r['resumable']}")
    out.append("stop: batches read before the stop / the epoch's batches (one rank); repeated, dropped: samples "
               "against the uninterrupted epoch; order: the stopped + resumed order the same as the uninterrupted "
               "one; cold: files dropped from the page cache, '?' where the drop was not verified")
    return out
