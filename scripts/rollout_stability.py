"""ROLL OUT against this host's outside load (issue 48): each visit's prediction for the target, read back
from a run directory with the harness's own target costs and recommendation, against the outside load the
visit recorded; and the ROLL OUT line's middle and interval, to hold two runs side by side.

    python scripts/rollout_stability.py RUN_DIR [RUN_DIR ...]

Per run: the visits, the Pearson r between outside load (other_cpu_pct) and the predicted samples/s on the
target (over the visits, and within cells: each less its cell's mean; each visit with the configuration
recommended for it; the run's stated host), the
predictions' range in quiet (< 10% outside load) and loaded visits, and the ROLL OUT line's figures. Then,
for each pair of runs, whether each one's middle lies inside the other's interval.
"""
from __future__ import annotations

import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harness.analysis.predictioninterval import target_interval  # noqa: E402
from harness.analysis.recommend import recommend  # noqa: E402
from harness.config.accelerators import get_accelerator  # noqa: E402
from harness.report.rollout import stated_host  # noqa: E402
from harness.report.stagetable import target_costs  # noqa: E402
from harness.results import rundir  # noqa: E402
from harness.results.repeats import merge_repeats  # noqa: E402

QUIET_PCT = 10.0


def pearson(x: list[float], y: list[float]) -> float:
    """statistics.correlation, 0 where either side is constant (a run of one cell's visits, say)."""
    try:
        return statistics.correlation(x, y)
    except statistics.StatisticsError:
        return 0.0


def within_cell(cells: list[str], loads: list[float], rates: list[float]) -> tuple[list[float], list[float]]:
    """Each visit's load and rate less its cell's mean: what is left once the cells' differences are out."""
    mean = {c: (statistics.mean(x for x, k in zip(loads, cells) if k == c),
                statistics.mean(y for y, k in zip(rates, cells) if k == c)) for c in set(cells)}
    return [x - mean[c][0] for x, c in zip(loads, cells)], [y - mean[c][1] for y, c in zip(rates, cells)]


def one_run(run_dir: Path) -> dict:
    visits = [v for v in rundir.read_results(run_dir) if v.measured]
    target = stated_host(merge_repeats(visits)[0])
    accelerator = get_accelerator(target.accelerator)
    loads, rates, cells, by_cell = [], [], [], {}
    for v in visits:
        costs = target_costs(v, target)
        if costs is None:
            continue
        rate = recommend(costs, target, accelerator).samples_per_s
        loads.append(float(v.figures.get("other_cpu_pct") or 0.0))
        rates.append(rate)
        cells.append(v.cell)
        by_cell.setdefault(v.cell, []).append(rate)
    best = max(by_cell.values(), key=statistics.median)
    band = target_interval(best)
    quiet = [r for r, x in zip(rates, loads) if x < QUIET_PCT]
    loaded = [r for r, x in zip(rates, loads) if x >= QUIET_PCT]
    return {"run": run_dir.name, "visits": len(rates), "r": pearson(loads, rates),
            "r_within": pearson(*within_cell(cells, loads, rates)),
            "median_load": statistics.median(loads), "quiet": (min(quiet), max(quiet)) if quiet else None,
            "loaded": (min(loaded), max(loaded)) if loaded else None, "middle": band.middle, "low": band.low,
            "high": band.high}


def main(paths: list[str]) -> None:
    runs = [one_run(Path(p)) for p in paths]
    for r in runs:
        rng = ", ".join(f"{k} {int(v[0])}-{int(v[1])}" for k in ("quiet", "loaded") if (v := r[k]))
        print(f"{r['run']}: {r['visits']} visits, median outside load {r['median_load']:.1f}%, r(load, predicted) "
              f"{r['r']:+.2f} (within cells {r['r_within']:+.2f}); per visit {rng}; best cell {r['middle']:.0f} "
              f"[{r['low']:.0f}, {r['high']:.0f}]")
    for i, a in enumerate(runs):
        for b in runs[i + 1:]:
            inside = a["low"] <= b["middle"] <= a["high"] and b["low"] <= a["middle"] <= b["high"]
            print(f"{a['run']} vs {b['run']}: middles {a['middle']:.0f} and {b['middle']:.0f}, "
                  f"{'each inside the other' if inside else 'NOT each inside the other'}'s interval")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
