"""An effect whose size depends on the machine's outside load is said to (harness.analysis.loaddependence), on
planted simulated runs: LRU x0.95 on a quiet machine and x1.10 at 50% outside load (as two same-code runs of
4xV100 once found), against a control whose effects do not move with the load."""
from __future__ import annotations

import itertools
import math

import numpy as np

from harness.analysis.effects import level_order
from harness.analysis.loaddependence import load_dependence
from harness.results.cellresult import CellResult

LEVELS = {"storage": ["raw", "mmap"], "cache": ["none", "lru"], "sampler": ["default", "balanced"]}
IDS = [",".join(f"{a}={lv}" for a, lv in zip(LEVELS, c)) for c in itertools.product(*LEVELS.values())]


def visit(levels: dict, repeat: int, load: float, thr: float) -> CellResult:
    return CellResult.from_json({"schema": 2, "cell": ",".join(f"{a}={lv}" for a, lv in levels.items()),
                                 "repeat": repeat, "strategies": levels, "emulated": True, "world_size": 4,
                                 "figures": {"throughput": thr, "other_cpu_pct": load}})


def run(lru_quiet: float, lru_loaded: float, seed: int = 0, passes: int = 6) -> list[CellResult]:
    """Passes alternate quiet (0-3% outside load) and loaded (about 50%); 2% noise per visit, 3% per pass."""
    rng = np.random.default_rng(seed)
    out = []
    for repeat in range(passes):
        load = float(rng.uniform(45, 55) if repeat % 2 else rng.uniform(0, 3))
        drift = math.exp(rng.normal(0, 0.03))
        lru = math.exp(math.log(lru_quiet) + (math.log(lru_loaded) - math.log(lru_quiet)) * load / 50)
        for combo in itertools.product(*LEVELS.values()):
            levels = dict(zip(LEVELS, combo))
            thr = 1000 * drift * (1.08 if levels["storage"] == "mmap" else 1.0) * (
                lru if levels["cache"] == "lru" else 1.0) * math.exp(rng.normal(0, 0.02))
            out.append(visit(levels, repeat, load, thr))
    return out


def test_a_planted_load_dependent_effect_is_found_with_both_sizes():
    results = run(0.95, 1.10)
    found = load_dependence(results, level_order(results, IDS))
    assert [(d.axis, d.level) for d in found] == [("cache", "lru")]
    d = found[0]
    assert 0.92 < d.quiet < 0.98 and 1.05 < d.loaded < 1.15 and d.low > 1
    assert "depends on the machine's load" in d.line() and "x0.9" in d.line()


def test_effects_that_do_not_move_with_the_load_are_not_flagged():
    """A 5% familywise test (Bonferroni over the 3 levels): about 5 false alarms in 100 runs, 10 at most."""
    flagged = sum(bool(load_dependence(r, level_order(r, IDS))) for r in (run(0.95, 0.95, s) for s in range(100)))
    assert flagged <= 10


def test_a_run_whose_load_did_not_vary_says_nothing():
    quiet = [v for v in run(0.95, 1.10) if v.repeat % 2 == 0]
    assert load_dependence(quiet, level_order(quiet, IDS)) == []


def test_the_first_screen_says_so_under_the_effects():
    from harness.report import report
    from harness.report.effecttables import run_effects

    results = run(0.95, 1.10)
    text = report.render(results, fitted=run_effects(results, IDS))
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if "depends on the machine's load" in line)
    assert lines[at].startswith("  cache=lru vs none") and any(line.startswith("EFFECTS") for line in lines[:at])
