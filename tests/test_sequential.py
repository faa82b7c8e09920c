"""harness.analysis.sequential: the looks' boundaries, the response, the covariate, decisions kept, and the
first screen's EFFECTS lines (harness.report.verdict), on synthetic cell lines."""
from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest

from harness.analysis import sequential
from harness.analysis.effects import HOST_RATE, THROUGHPUT, fit_effects, observations
from harness.measure.rankrecord import RankRecord
from harness.report import verdict
from harness.results.cellresult import CellResult

LEVELS = {"storage": ["raw", "mmap"], "sampler": ["default", "balanced"]}
CELLS = [dict(zip(LEVELS, c)) for c in itertools.product(*LEVELS.values())]
IDS = ["/".join(c.values()) for c in CELLS]


def visits(passes: int, mmap_cpu: float = 1.0, noise: float = 0.01, load: float = 0.0, seed: int = 0,
           feed: float = 3.0, au: float = 20.0) -> list[CellResult]:
    """4 cells per pass; mmap's CPU per sample x `mmap_cpu`; samples/s = the host rate x the free share of the
    CPU (outside load drawn uniform in [0, load]) x noise."""
    rng = np.random.default_rng(seed)
    out = []
    for repeat in range(passes):
        for i in rng.permutation(len(CELLS)):
            c = CELLS[i]
            other = float(rng.uniform(0, load))
            cpu = 0.004 * (mmap_cpu if c["storage"] == "mmap" else 1.0) * float(np.exp(rng.normal(0, noise)))
            thr = 2 / cpu * (1 - other / 100) * float(np.exp(rng.normal(0, noise)))
            out.append(CellResult.from_json({
                "schema": 2, "cell": IDS[i], "repeat": repeat, "strategies": c, "elapsed_s": 4.0, "world_size": 4,
                "figures": {"throughput": thr, "throughput_ci": [thr * 0.95, thr * 1.05], "au_pct": au,
                            "loader_cpu_s_per_sample": 0.7 * cpu, "rank_cpu_s_per_sample": 0.3 * cpu,
                            "cores_to_feed": feed, "other_cpu_pct": other}}))
    return out


def test_the_boundaries_are_the_published_pocock_and_obrien_fleming_constants():
    equal = (1.0, 2.0, 3.0, 4.0)  # four equally spaced looks, two-sided 5% (Jennison and Turnbull, table 2.1)
    assert sequential.boundaries(equal, 0.05, sequential.POCOCK)[0] == pytest.approx(2.361, abs=0.01)
    assert sequential.boundaries(equal, 0.05, sequential.OBRIEN_FLEMING)[-1] == pytest.approx(2.024, abs=0.01)
    assert sequential.boundaries((5.0,), 0.05)[0] == pytest.approx(1.960, abs=0.002)  # one look: the plain z
    assert sequential.boundaries((2.0, 3.0, 4.0, 5.0), 0.01)[0] > sequential.boundaries((2.0, 3.0, 4.0, 5.0), 0.05)[0]


def test_looks_are_passes_2_to_5_and_a_longer_run_takes_its_last_at_its_end():
    assert sequential.look_passes(1) == [] and sequential.look_passes(3) == [2, 3]
    assert sequential.look_passes(5) == [2, 3, 4, 5] and sequential.look_passes(8) == [2, 3, 4, 8]
    assert sequential.looks_left(4) == 1 and sequential.looks_left(5) == 0


def test_a_budget_plans_its_looks_over_the_passes_it_fits():
    """Planned once from the first whole pass (4 visits of 4 s: 16 s a pass): a budget of 180 s fits 11
    passes, and the four looks spread from pass 2 to 11; where 5 or fewer fit, one look a pass."""
    first = visits(1)
    assert sequential.planned_passes(first, [0], 180.0) == 11
    assert sequential.planned_passes(first, [0], None) is None and sequential.planned_passes([], [], 180.0) is None
    assert sequential.planned_passes(first, [0], 20.0) == sequential.FIRST_LOOK  # never before the first look
    assert sequential.schedule(11) == [2, 5, 8, 11] and sequential.schedule(6) == [2, 3, 5, 6]
    assert sequential.schedule(4) == [2, 3, 4] and sequential.schedule(None) == [2, 3, 4, 5]
    assert sequential.look_passes(9, 11) == [2, 5, 8] and sequential.looks_left(9, 11) == 1
    run = visits(11, mmap_cpu=1.0, noise=0.05, seed=2)
    planned = sequential.decide(run, IDS, sequential.Rule(cores=2.0, budget_s=180.0))
    assert (planned.plan, planned.looks, planned.looks_planned, planned.looks_left) == (11, 4, 4, 0)
    assert sequential.decide(run[:16], IDS, sequential.Rule(cores=2.0, budget_s=180.0)).looks_left == 3
    assert sequential.decide(run, IDS, sequential.Rule(cores=2.0)).plan is None  # --repeats: passes 2, 3, 4, 11


def test_the_plan_counts_the_first_passs_start_up_once():
    """The run's first visit starts the ranks (20 s here, 4 s after): the first pass took 32 s, the rest of a
    180 s budget fits 9 more passes of 16 s, so 10 are planned (11 would need 192 s)."""
    first = visits(1)
    first[0] = dataclasses.replace(first[0], elapsed_s=20.0)
    assert sequential.planned_passes(first, [0], 180.0) == 10


def test_a_budget_that_ends_before_its_plans_last_look_takes_it_at_its_end():
    """Planned for 11 passes (looks after 2, 5, 8, 11), the passes took longer and the budget ended after 9:
    the looks the run took stay (their decisions were kept as it went) and the last is after pass 9, at the
    last look's boundary; while the run goes on, no look at pass 9."""
    run = visits(9, mmap_cpu=1.0, noise=0.05, seed=2)
    going = sequential.decide(run, IDS, sequential.Rule(cores=2.0, budget_s=180.0))
    ended = sequential.decide(run, IDS, sequential.Rule(cores=2.0, budget_s=180.0, ended=True))
    assert sequential.look_passes(9, 11, ended=True) == [2, 5, 8, 9]
    assert sequential.look_passes(8, 11, ended=True) == [2, 5, 8]
    assert (going.looks, ended.looks) == (3, 4)
    assert {x.passes for x in going.levels if not x.decided} <= {8}
    assert {x.passes for x in ended.levels if not x.decided} <= {9} and ended.levels[0].z == going.levels[0].z


def test_the_response_is_the_host_rate_where_the_cpu_binds_and_samples_s_elsewhere():
    assert sequential.response_of(visits(2), cores=2.0) == HOST_RATE  # 3 cores x 4 ranks > 2 cores
    assert sequential.response_of(visits(2), cores=64.0) == THROUGHPUT  # enough cores: not CPU-bound
    assert sequential.response_of(visits(2, au=95.0), cores=2.0) == THROUGHPUT  # a real device binds
    assert sequential.response_of(visits(2), cores=None) == THROUGHPUT  # unknown cores
    assert sequential.decide(visits(3), IDS, sequential.Rule(cores=64.0)).response == THROUGHPUT


def test_the_covariate_takes_the_outside_load_out_of_samples_s():
    loaded = visits(4, mmap_cpu=1 / 1.10, load=50.0, seed=3)
    plain = fit_effects(observations(loaded, THROUGHPUT), LEVELS, interactions=False)
    adjusted = fit_effects(observations(loaded, THROUGHPUT, adjust=True), LEVELS, interactions=False)
    width = {name: [e.high / e.low for e in fitted if e.level == "mmap"][0]
             for name, fitted in (("plain", plain), ("adjusted", adjusted))}
    assert np.log(width["adjusted"]) < np.log(width["plain"]) / 3  # the load was most of the noise
    (mmap,) = [e for e in adjusted if e.level == "mmap"]
    assert mmap.low < 1.10 < mmap.high


def test_the_references_take_the_hosts_own_speed_out_of_the_host_rate():
    """The host's speed drifts between visits (sd 8%) and moves every CPU cost alike, the fixed reference
    work the ranks time in the same visit too: with the references as covariates the storage effect's interval
    shrinks to about the remaining noise's, and its estimate stays true. A visit without a reading takes the
    others' mean; a run without any is fitted as before."""
    rng = np.random.default_rng(5)
    drifted = visits(4, mmap_cpu=1.05, seed=5)
    for r in drifted:
        speed = float(np.exp(rng.normal(0, 0.08)))
        r.figures = r.figures.replace(loader_cpu_s_per_sample=r.figures.loader_cpu_s_per_sample * speed,
                                      rank_cpu_s_per_sample=r.figures.rank_cpu_s_per_sample * speed)
        reference = {"version": 1, "readings": 2, "decode_s": 7e-4 * speed * float(np.exp(rng.normal(0, 0.01))),
                     "rank_s": 5e-4 * speed * float(np.exp(rng.normal(0, 0.01)))}
        r.ranks = [RankRecord(rank=0, reference=reference)]

    def mmap_of(results):
        fitted = fit_effects(observations(results, HOST_RATE, adjust=True), LEVELS, HOST_RATE, interactions=False)
        return [e for e in fitted if e.level == "mmap"][0]

    without = [dataclasses.replace(r, ranks=[]) for r in drifted]
    plain, adjusted = mmap_of(without), mmap_of(drifted)
    assert np.log(adjusted.high / adjusted.low) < np.log(plain.high / plain.low) / 2
    assert adjusted.low < 1 / 1.05 < adjusted.high
    drifted[0].ranks = []  # no reading: the mean of the others' logs, still fitted
    assert mmap_of(drifted).high / mmap_of(drifted).low < plain.high / plain.low


def test_an_effect_is_decided_once_and_kept_and_the_two_responses_are_shown():
    d = sequential.decide(visits(5, mmap_cpu=1.07, seed=1), IDS, sequential.Rule(cores=2.0))
    (mmap,) = [x for x in d.levels if x.effect.level == "mmap"]
    assert d.response == HOST_RATE and mmap.word == "lower" and mmap.passes == 2  # decided at the first look
    assert mmap.beside is not None and mmap.beside.figure == THROUGHPUT
    assert mmap.z == pytest.approx(sequential.boundaries((2.0, 3.0, 4.0, 5.0), 0.05)[0])
    family = sequential.decide(visits(5, mmap_cpu=1.07, seed=1), IDS, sequential.Rule(family_alpha=0.05, cores=2))
    assert [x for x in family.levels if x.effect.level == "mmap"][0].z > mmap.z  # 0.05 over two effects: wider


def test_the_first_screen_says_which_response_decided_and_what_an_open_projection_assumes():
    lines = verdict.decision_lines(sequential.decide(visits(5, mmap_cpu=1.07, seed=1), IDS,
                                                     sequential.Rule(cores=2.0)))
    assert lines[0].startswith("EFFECTS decided on the host rate (cores / CPU s per sample: the host's CPU binds)")
    assert "each decision wrong in at most 5% of runs" in lines[0]
    assert lines[1].startswith("  storage=mmap vs raw: lower (pass 2): host rate x0.9")
    assert ", samples/s x0.9" in lines[1]
    noisy = verdict.decision_lines(sequential.decide(visits(2, mmap_cpu=1.02, noise=0.2, seed=2), IDS))
    (mmap,) = [x for x in noisy if "storage=mmap" in x]
    assert mmap.startswith("  storage=mmap vs raw: open; if x") and "(the estimate) were the true effect" in mmap[:90]


def test_two_responses_that_disagree_are_named():
    loaded = visits(5, seed=4)
    for r in loaded:  # samples/s of mmap x1.3 while its CPU per sample does not move
        if r.strategies["storage"] == "mmap":
            r.figures = r.figures.replace(throughput=r.figures.throughput * 1.3)
    lines = verdict.decision_lines(sequential.decide(loaded, IDS, sequential.Rule(cores=2.0)))
    assert any(x.startswith("  the two responses' intervals do not overlap for: storage=mmap") for x in lines)


def test_a_look_with_too_few_residual_df_decides_nothing():
    """4 cells, the outside load and two references as covariates: pass 2's fit keeps 1 residual df, pass 3's
    4. A planted x1.07 with almost no noise is left open at pass 2 and decided at pass 3."""
    rng = np.random.default_rng(7)
    planted = visits(3, mmap_cpu=1.07, noise=0.001, load=20.0, seed=7)
    for r in planted:
        reference = {"version": 1, "readings": 2, "decode_s": 7e-4 * float(np.exp(rng.normal(0, 0.01))),
                     "rank_s": 5e-4 * float(np.exp(rng.normal(0, 0.01)))}
        r.ranks = [RankRecord(rank=0, reference=reference)]
    order = {"storage": ["raw", "mmap"], "sampler": ["default", "balanced"]}
    assert [sequential.fit_at(planted, order, p, HOST_RATE, 0.95)[1] for p in (1, 2)] == [1, 4]
    two = sequential.decide([r for r in planted if r.repeat <= 1], IDS, sequential.Rule(cores=2.0))
    assert {x.word for x in two.levels} == {"open"}
    (mmap,) = [x for x in sequential.decide(planted, IDS, sequential.Rule(cores=2.0)).levels
               if x.effect.level == "mmap"]
    assert mmap.word == "lower" and mmap.passes == 3


def test_the_report_takes_the_rule_with_the_budgets_plan_and_end_from_the_run_directory(tmp_path):
    from harness.report.report import rule_of
    from harness.results.environment import Environment
    from harness.run import budgetstate

    env = Environment(min_effect=0.05, cpu_allowance=2.0, budget_s=300.0)
    budgetstate.write(tmp_path, budgetstate.BudgetState(300.0, 120.0))
    assert rule_of(env, tmp_path) == sequential.Rule(0.05, None, 2.0, 300.0, False)
    budgetstate.write(tmp_path, budgetstate.BudgetState(300.0, 290.0, ended=True))
    assert rule_of(env, tmp_path).ended and rule_of(env).ended is False
    assert rule_of(dataclasses.replace(env, budget_s=0.0)).budget_s is None  # a run without a budget: no plan
