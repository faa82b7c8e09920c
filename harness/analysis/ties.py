"""A cell's throughput interval and the one definition of "tied", for FASTEST, the budget and the
ranking.

- A cell's interval is its recorded `throughput_ci` when the cell was measured and both ends are
  finite numbers; otherwise it has none (`interval_of` is the only place that decides).
- Two cells are **tied** when both have an interval and the two overlap: the data cannot tell them
  apart. A cell without an interval is tied with no cell: nothing can be said of it, and it is
  shown so ("no interval"), never folded into a tie or into an order.
- Cell a is **ahead** of cell b when both have an interval and a's lies wholly above b's.
- The leader is the measured cell with the highest point throughput; the tied set is the cells tied
  with it.
- A cell's rank is 1 + the number of cells ahead of it; a cell without an interval has no rank
  (None).
- A tied cell is **within m** of the leader when the 95% interval of its throughput ratio to the
  leader, paired by pass (each pass's visit of the cell against that pass's visit of the leader, so
  that the machine's drift between passes cancels), lies inside [1 / (1 + m), 1 + m] (an
  equivalence test): it is as fast, as far as the smallest effect that matters goes. The fastest
  set is decided when every tied cell is within m of the leader or decidedly slower by the same
  paired interval; the budget stops asking about it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from harness.results import stats


@dataclass(frozen=True)
class Interval:
    low: float
    high: float
    label: str = ""  # what it is: level, method, n

    def overlaps(self, other: Interval) -> bool:
        return self.low <= other.high and other.low <= self.high


def interval_of(result) -> Interval | None:
    """The measured cell's finite throughput interval, or None."""
    f = result.figures
    ci = f.throughput_ci
    if not result.measured or not ci or len(ci) != 2 \
            or not all(isinstance(v, (int, float)) and math.isfinite(v) for v in ci):
        return None
    return Interval(float(ci[0]), float(ci[1]), f.throughput_ci_label or "")


def tied(a, b) -> bool:
    """Both measured with an interval, and the intervals overlap."""
    ia, ib = interval_of(a), interval_of(b)
    return ia is not None and ib is not None and ia.overlaps(ib)


def ahead(a, b) -> bool:
    """a's interval lies wholly above b's (both known)."""
    ia, ib = interval_of(a), interval_of(b)
    return ia is not None and ib is not None and ia.low > ib.high


def paired_ratio(visits: list, cell: str, leader: str, confidence: float = 0.95) -> Interval | None:
    """The cell's throughput over the leader's, paired by pass: exp(mean +- t * se of the per-pass
    log ratios); None with fewer than 2 passes that measured both."""
    by_pass: dict[int, dict[str, float]] = {}
    for v in visits:
        if v.measured and v.cell in (cell, leader) and v.figures.throughput and v.figures.throughput > 0:
            by_pass.setdefault(v.repeat, {})[v.cell] = v.figures.throughput
    logs = [math.log(p[cell] / p[leader]) for p in by_pass.values() if cell in p and leader in p]
    if len(logs) < 2:
        return None
    mean = sum(logs) / len(logs)
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (len(logs) - 1))
    half = stats.t_quantile(confidence, len(logs) - 1) * sd / math.sqrt(len(logs))
    return Interval(math.exp(mean - half), math.exp(mean + half), f"paired by pass, n={len(logs)}")


def settled(visits: list, cell: str, leader: str, min_effect: float) -> bool:
    """The cell is within min_effect of the leader, or decidedly slower (paired_ratio)."""
    iv = paired_ratio(visits, cell, leader)
    if iv is None:
        return False
    return iv.high < 1 or (iv.low >= 1 / (1 + min_effect) and iv.high <= 1 + min_effect)


def leader_and_tied(cells: list) -> tuple[object | None, list]:
    """The measured cell with the highest throughput, and the other measured cells tied with it."""
    measured = [c for c in cells if c.measured]
    if not measured:
        return None, []
    leader = max(measured, key=lambda c: c.figures.throughput)
    return leader, [c for c in measured if c is not leader and tied(leader, c)]


def tie_ranks(cells: list) -> dict[str, tuple[int | None, bool]]:
    """cell id -> (rank, tied with another measured cell); rank None for a cell without an
    interval."""
    measured = [c for c in cells if c.measured]
    out = {}
    for c in measured:
        rank = None if interval_of(c) is None else 1 + sum(1 for o in measured if o is not c and ahead(o, c))
        out[c.cell] = (rank, any(o is not c and tied(o, c) for o in measured))
    return out
