"""A result's throughput relative to the machine: the `vs_probe` figure, a multiple of the
in-memory ideal loader's samples/s measured in the same repeat (probe.jsonl)."""
from __future__ import annotations

import dataclasses

from harness.results.cellresult import CellResult


def relative_to_probe(results: list[CellResult], probe) -> list[CellResult]:
    """Each measured result's throughput as a multiple of its repeat's in-memory ideal loader
    (``probe``: a harness.results.probeline.ProbeSeries of probe.jsonl, figure `vs_probe`): the
    figure that stays comparable across machines. The one place it is computed (the baseline's
    `normalised` is this figure)."""
    out = []
    for r in results:
        thr, ideal = r.figures.throughput, probe.ideal(r.repeat)
        if thr is not None and ideal is not None:
            r = dataclasses.replace(r, figures=r.figures.replace(vs_probe=thr / ideal))
        out.append(r)
    return out
