"""The budget against known truth: simulated runs of a 2 x 2 x 2 matrix (storage x sampler x cache) in which
the sampler's effect is x1.04 on mmap and x1/1.04 on raw (an interaction: x1.000 averaged over storage), the
cache has no effect and mmap is x1.10 of raw, 2% noise per visit and drift between passes. Each run starts with
2 passes, then follows harness.analysis.budget.next_pass until it says stop (or 12 passes). Over 200 runs:
a no-effect level is decided "higher" or "lower" in at most 5% of them, and the final intervals cover the true
averaged effect in at least 93% of levels (before the budget revisited the leader's cells alone, 12 of 20 such
runs ended with the sampler "decided")."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from harness.analysis.budget import next_pass
from harness.analysis.effects import HIGHER, LOWER, fit_effects, level_order, observations
from harness.results.cellresult import CellResult

LEVELS = {"storage": ["raw", "mmap"], "sampler": ["default", "balanced"], "cache": ["none", "lru"]}
CELLS = [dict(zip(LEVELS, combo)) for combo in itertools.product(*LEVELS.values())]
IDS = [",".join(f"{a}={lv}" for a, lv in c.items()) for c in CELLS]
# averaged over the other axes (the geometric mean over their levels): mmap's x1.10 carries half of the sampler's
# x1.04 on mmap and x1/1.04 on raw, so x1.10 * 1.04; the sampler's two directions cancel
TRUE_AVERAGED = {"storage": 1.10 * 1.04, "sampler": 1.0, "cache": 1.0}
RUNS, START, MAX_PASSES, NOISE = 200, 2, 12, 0.02


def truth(cell: dict) -> float:
    sampler = 1.04 if cell["storage"] == "mmap" else 1 / 1.04
    return 1000.0 * (1.10 if cell["storage"] == "mmap" else 1.0) * (sampler if cell["sampler"] == "balanced" else 1.0)


def visit(rng, index: int, repeat: int, drift: float) -> CellResult:
    thr = truth(CELLS[index]) * drift * float(np.exp(rng.normal(0, NOISE)))
    return CellResult.from_json({"schema": 2, "cell": IDS[index], "repeat": repeat, "strategies": CELLS[index],
                                 "elapsed_s": 1.0, "figures": {"throughput": thr,
                                                               "throughput_ci": [thr * 0.99, thr * 1.01]}})


def one_budget(seed: int):
    rng = np.random.default_rng(seed)
    results, repeat = [], 0
    while repeat < MAX_PASSES:
        todo = list(range(len(IDS))) if repeat < START else next_pass(results, IDS, seconds_left=1e9)
        if not todo:
            break
        drift = float(np.exp(rng.normal(0, 0.03)))
        results += [visit(rng, i, repeat, drift) for i in rng.permutation(todo)]
        repeat += 1
    fitted = fit_effects(observations(results, "throughput"), level_order(results, IDS), interactions=False)
    return {e.axis: e for e in fitted if e.level != e.reference}, repeat


@pytest.mark.slow  # a Monte Carlo study of many simulated budgets
def test_the_budget_neither_invents_effects_nor_narrows_intervals_away_from_the_truth():
    false_decided = covered = levels = stopped = 0
    for seed in range(RUNS):
        effects, passes = one_budget(seed)
        stopped += passes < MAX_PASSES
        for axis, e in effects.items():
            levels += 1
            covered += e.low <= TRUE_AVERAGED[axis] <= e.high
            if TRUE_AVERAGED[axis] == 1.0 and e.decision(0.05) in (HIGHER, LOWER):
                false_decided += 1
    no_effect_levels = 2 * RUNS
    print(f"false decisions {false_decided}/{no_effect_levels}, coverage {covered}/{levels}, "
          f"stopped early {stopped}/{RUNS}")
    assert levels == 3 * RUNS
    assert false_decided <= math.floor(0.05 * no_effect_levels)
    assert covered >= math.ceil(0.93 * levels)
    assert stopped >= RUNS // 2  # the budget stops when nothing is open, it does not run to the cap


# The sequential rule with the covariate, on the main job's design (3 x 2 x 2 x 2 = 24 cells) and the noise
# issue 49 measured on the 2-core host: log CPU per sample sd 0.036 per visit; samples/s = the host rate x the
# free share of the CPU (outside load drawn uniform in [0, 50]%) x noise of sd 0.069. Planted on the host rate:
# hdf5 x1/1.07 (7% more CPU per sample), lru x1/1.03, every other level x1.00.
SEQ_LEVELS = {"storage": ["raw", "mmap", "hdf5"], "cache": ["none", "lru"], "batching": ["fixed", "dynamic"],
              "sampler": ["default", "balanced"]}
SEQ_CELLS = [dict(zip(SEQ_LEVELS, c)) for c in itertools.product(*SEQ_LEVELS.values())]
SEQ_IDS = ["/".join(c.values()) for c in SEQ_CELLS]
PLANTED_CPU = {("storage", "hdf5"): 1.07, ("cache", "lru"): 1.03}
SEQ_RUNS, CPU_SD, RATE_SD = 150, 0.036, 0.069


def seq_visit(rng, index: int, repeat: int, cpu_sd: float = CPU_SD) -> CellResult:
    cell = SEQ_CELLS[index]
    cpu = 0.004 * math.prod(PLANTED_CPU.get((a, lv), 1.0) for a, lv in cell.items())
    cpu *= float(np.exp(rng.normal(0, cpu_sd)))
    load = float(rng.uniform(0, 50))
    thr = 2 / cpu * (1 - load / 100) * float(np.exp(rng.normal(0, RATE_SD)))
    return CellResult.from_json({"schema": 2, "cell": SEQ_IDS[index], "repeat": repeat, "strategies": cell,
                                 "elapsed_s": 4.0, "world_size": 4, "figures": {
                                     "throughput": thr, "throughput_ci": [thr * 0.9, thr * 1.1], "au_pct": 20.0,
                                     "cores_to_feed": 3.0, "other_cpu_pct": load,
                                     "loader_cpu_s_per_sample": 0.7 * cpu, "rank_cpu_s_per_sample": 0.3 * cpu}})


def one_sequential_run(seed: int, min_effect: float = 0.05, budget_s: float | None = None,
                       cpu_sd: float = CPU_SD):
    """One run: the budget's passes until next_pass says stop; with `budget_s`, the looks planned over the
    passes it fits (a pass of 24 visits of 4 s: 96 s); `cpu_sd`: the CPU per sample's noise per visit."""
    from harness.analysis.sequential import Rule, decide

    rule = Rule(min_effect, cores=2.0, budget_s=budget_s)
    rng = np.random.default_rng(10_000 + seed)
    results, repeat = [], 0
    while True:
        todo = list(range(len(SEQ_IDS))) if repeat == 0 else next_pass(results, SEQ_IDS, 1e9, rule)
        if not todo:
            break
        results += [seq_visit(rng, i, repeat, cpu_sd) for i in rng.permutation(todo)]
        repeat += 1
    return decide(results, SEQ_IDS, rule), repeat


@pytest.mark.slow  # a Monte Carlo study of the stopping rule
def test_the_sequential_rule_keeps_its_error_rate_finds_7_percent_and_never_gets_a_sign_wrong():
    false_different = power = wrong_sign = stopped_by_3 = 0
    for seed in range(SEQ_RUNS):
        d, passes = one_sequential_run(seed)
        stopped_by_3 += passes <= 3
        for x in d.levels:
            planted = PLANTED_CPU.get((x.effect.axis, x.effect.level), 1.0)
            if planted == 1.0:
                false_different += x.word in (HIGHER, LOWER)
            elif x.word == HIGHER:  # more CPU per sample is a lower host rate: higher is the wrong sign
                wrong_sign += 1
            if planted == 1.07:
                power += x.word == LOWER
    nulls = 3 * SEQ_RUNS
    print(f"false different {false_different}/{nulls}, x1.07 called lower {power}/{SEQ_RUNS}, wrong sign "
          f"{wrong_sign}, stopped by pass 3 {stopped_by_3}/{SEQ_RUNS}")
    assert false_different <= math.ceil(0.05 * nulls)
    assert power >= math.ceil(0.95 * SEQ_RUNS)
    assert wrong_sign == 0
    assert stopped_by_3 >= SEQ_RUNS // 2  # decided early, not at the cap


@pytest.mark.slow  # a Monte Carlo study of the stopping rule at every look
def test_a_null_effect_watched_over_all_four_looks_is_called_different_in_at_most_5_percent():
    """With a minimum effect too small to decide "no effect", a null effect is looked at after passes 2, 3, 4
    and 5: four looks at the plain 95% interval call it different in about 12% of runs; the boundaries keep 5%."""
    false_different = 0
    for seed in range(SEQ_RUNS):
        d, passes = one_sequential_run(seed, min_effect=0.001)
        false_different += sum(x.word in (HIGHER, LOWER) for x in d.levels
                               if (x.effect.axis, x.effect.level) not in PLANTED_CPU)
    print(f"false different over four looks {false_different}/{3 * SEQ_RUNS}")
    assert false_different <= math.ceil(0.05 * 3 * SEQ_RUNS)


@pytest.mark.slow  # a Monte Carlo study of the looks a budget plans
def test_looks_spread_over_a_budgets_passes_keep_the_error_rate_and_find_3_percent_more_often():
    """A budget that fits 11 passes looks after passes 2, 5, 8 and 11 instead of 2 to 5: at the noise of a
    slower shared host (CPU per sample sd 0.10 a visit, the 2-core Intel host's) a null effect watched over
    them is still called different in at most 5% of runs, and the planted x1.03 (lru), which looks after
    passes 2 to 5 leave open in most runs, is called lower more often; never the wrong sign."""
    false_different, found, found_unplanned, wrong_sign = 0, 0, 0, 0
    for seed in range(SEQ_RUNS):
        d, passes = one_sequential_run(seed, min_effect=0.001, budget_s=11 * 96.0, cpu_sd=0.10)
        assert passes <= 11
        for x in d.levels:
            planted = PLANTED_CPU.get((x.effect.axis, x.effect.level), 1.0)
            false_different += planted == 1.0 and x.word in (HIGHER, LOWER)
            wrong_sign += planted > 1.0 and x.word == HIGHER
            found += planted == 1.03 and x.word == LOWER
        unplanned, _ = one_sequential_run(seed, min_effect=0.001, cpu_sd=0.10)
        found_unplanned += sum(x.word == LOWER for x in unplanned.levels
                               if PLANTED_CPU.get((x.effect.axis, x.effect.level)) == 1.03)
    print(f"false different {false_different}/{3 * SEQ_RUNS}; x1.03 lower {found}/{SEQ_RUNS} with the plan, "
          f"{found_unplanned}/{SEQ_RUNS} looking after passes 2 to 5")
    assert false_different <= math.ceil(0.05 * 3 * SEQ_RUNS)
    assert wrong_sign == 0
    assert found >= found_unplanned + SEQ_RUNS // 10
