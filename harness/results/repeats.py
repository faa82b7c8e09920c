"""The repeats of a cell merged into one CellSummary: the medians of the measured repeats' figures,
the throughput's interval across repeats (harness.results.stats), and how many repeats failed and
why."""
from __future__ import annotations

from dataclasses import dataclass, field, fields

import numpy as np

from harness.results import stats
from harness.results.cellresult import CellResult, Figures


@dataclass
class CellSummary(CellResult):
    """The repeats of one cell merged. `figures` are the medians over the measured repeats
    (integers stay integers), `ranks` the measured repeats' ranks pooled. A cell counts as errored
    only when no repeat was measured; `failed_repeats` and `repeat_errors` say how many of the
    others failed and why."""

    repeats: int = 1  # measured repeats
    failed_repeats: int = 0
    repeat_errors: list[str] = field(default_factory=list)
    throughput_repeats: list[float] = field(default_factory=list)
    throughput_summary: dict | None = None  # harness.results.stats.summary of throughput_repeats, with 2+ repeats

    @property
    def total_repeats(self) -> int:
        return self.repeats + self.failed_repeats


def merge_repeats(results: list[CellResult]) -> list[CellSummary]:
    """One CellSummary per cell id, in first-seen order. Idempotent: summaries pass through
    unchanged."""
    groups: dict[str, list[CellResult]] = {}
    for r in results:
        groups.setdefault(r.cell, []).append(r)
    out = []
    for reps in groups.values():
        if len(reps) == 1 and isinstance(reps[0], CellSummary):
            out.append(reps[0])
            continue
        ok = [r for r in reps if r.measured]
        first = (ok or reps)[0]
        base = {f.name: getattr(first, f.name) for f in fields(CellResult)}
        merged = CellSummary(**base, repeats=len(ok), failed_repeats=len(reps) - len(ok),
                             repeat_errors=[r.error or "no steps" for r in reps if not r.measured],
                             throughput_repeats=[r.figures.throughput for r in ok])
        if len(ok) > 1:
            every = [r.figures.values() for r in ok]
            figures = {}
            for key, value in every[0].items():
                values = [v.get(key) for v in every]
                numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
                figures[key] = _median_like(values) if numeric else value
            across = stats.median_interval(merged.throughput_repeats)  # replaces the runs' own intervals
            figures.update(throughput_ci=[across["low"], across["high"]], throughput_ci_label=across["label"])
            merged.figures = Figures.from_json(figures)
            merged.throughput_summary = stats.summary(merged.throughput_repeats)
            merged.ranks = [rank for r in ok for rank in r.ranks]
        out.append(merged)
    return out


def _median_like(values: list) -> float | int:
    """The median, kept an integer when every value is one (step counts, events)."""
    m = float(np.median(values))
    return int(round(m)) if all(isinstance(v, int) for v in values) else m
