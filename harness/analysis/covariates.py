"""Pure: what a visit carries besides its figure into the effects fit (harness.analysis.effects):
its covariates, log(1 - outside load) and the log of the reference work its ranks timed
(harness.measure.reference), and whether its load was high enough to name (`disturbed`) or to leave
the fit (`extreme`).

The references carry what the host's own speed did that minute (another guest on the same cores,
the clock). On the 2-core host's main job (120 visits) they took the host rate's residual sd from
0.063 to 0.052 and each effect's standard error down by 15-18%; the references did not differ
between the levels (every level within 1.3 standard errors). A disturbed visit is kept and adjusted
for; a visit without a reference reading gets the run's mean."""
from __future__ import annotations

import math

import numpy as np

from harness.measure.hostload import OUTSIDE_LOAD_PCT
from harness.results.cellresult import CellResult

# a visit beyond either leaves the fit: the run's share of the CPU is then more the neighbour's schedule than
# the covariate's straight line (the covariate was measured up to about 60%), and steal is not in it
EXTREME_LOAD_PCT, EXTREME_STEAL_PCT = 60.0, 5.0
MAX_LOAD_PCT = 95.0  # the covariate's outside load is capped here (log(1 - 1) has no value)


def load_covariate(result: CellResult) -> float:
    """log(1 - other_cpu_pct / 100) of the visit (0 when unrecorded), the load capped at
    MAX_LOAD_PCT."""
    pct = min(max(result.figures.other_cpu_pct or 0.0, 0.0), MAX_LOAD_PCT)
    return math.log(1 - pct / 100)


def reference_covariates(results: list[CellResult]) -> dict[int, tuple[float, float]]:
    """id(visit) -> (log reference decode s, log reference step s), each the mean over the visit's
    ranks' readings (harness.measure.reference); a visit without one gets the mean of the others'
    logs. Empty when no visit has a reading (older lines), or a reading's version differs (a
    changed reference work)."""
    read = {}
    for r in results:
        refs = [x.reference for x in r.ranks if x.reference]
        if refs and all(x.get("decode_s", 0) > 0 and x.get("rank_s", 0) > 0 for x in refs):
            read[id(r)] = (refs[0].get("version"), math.log(float(np.mean([x["decode_s"] for x in refs]))),
                           math.log(float(np.mean([x["rank_s"] for x in refs]))))
    if not read or len({v[0] for v in read.values()}) > 1:
        return {}
    mean = tuple(float(np.mean([v[k] for v in read.values()])) for k in (1, 2))
    return {id(r): read[id(r)][1:] if id(r) in read else mean for r in results}


def disturbed(result: CellResult) -> bool:
    """Outside load above the warning's threshold during the visit (harness.measure.hostload):
    named in the report, kept in the fit and adjusted for."""
    return (result.figures.other_cpu_pct or 0) > OUTSIDE_LOAD_PCT


def extreme(result: CellResult) -> bool:
    """Outside load above EXTREME_LOAD_PCT or steal above EXTREME_STEAL_PCT: the visit leaves the
    fit."""
    f = result.figures
    return (f.other_cpu_pct or 0) > EXTREME_LOAD_PCT or (f.steal_pct or 0) > EXTREME_STEAL_PCT
