"""ROLL OUT (harness.report.rollout): the configuration to use on the target, right after FASTEST, from a real
smoke run of two passes (tests/fixtures/run-smoke-2passes/cells.jsonl: 3 storages x 2 visits x 2 ranks, with the
stage costs the target model needs)."""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from harness.analysis import stages
from harness.analysis.ties import leader_and_tied
from harness.config.target import Target
from harness.errors import UsageError
from harness.report import report, rollout
from harness.report.effecttables import run_effects
from harness.results import rundir
from harness.results.repeats import merge_repeats

FIXTURE = Path(__file__).parent / "fixtures" / "run-smoke-2passes"


def results():
    return rundir.read_results(FIXTURE)


def lines(target=None, min_effect=0.05):
    visits = results()
    cells = merge_repeats(visits)
    leader, tied = leader_and_tied(cells)
    return rollout.rollout_lines(cells, visits, [leader, *tied], target, min_effect)


def test_the_first_screen_has_the_roll_out_line_right_after_fastest():
    visits = results()
    text = report.render(visits, fitted=run_effects(visits, None))
    first = text.splitlines()
    at = next(i for i, line in enumerate(first) if line.startswith("ROLL OUT"))
    assert first[0].startswith("FASTEST") and all(not line.startswith(("EFFECTS", "BINDS")) for line in first[:at])
    assert "V100-16GB" in first[at] and "modelled" in first[at]


def test_without_a_target_the_stated_host_is_named_with_the_scenarios_accelerators():
    head = lines()[0]
    assert head.startswith("ROLL OUT on 1 node(s) x 2 V100-16GB, 16 cores per node (a stated host: 8 cores per "
                           "accelerator; [target] sets yours): ")
    assert "90% prediction interval: 2 visits' spread and the model's own error" in head  # not a point


def test_a_target_is_used_as_given_and_changes_the_prediction():
    stated = lines()[0]
    small = Target(gpus_per_node=2, cores_per_node=2.0, accelerator="V100-16GB", workers_per_rank=1,
                   batch_size=8, name="tiny")
    given = lines(small)[0]
    assert given.startswith("ROLL OUT on 1 node(s) x 2 V100-16GB, 2 cores per node tiny: ")
    assert given != stated


def test_each_visit_gives_a_prediction_and_the_range_spans_them():
    visits = results()
    cells = merge_repeats(visits)
    target = rollout.stated_host(cells[0])
    found = rollout.predicted(cells[0], [v for v in visits if v.cell == cells[0].cell], target)
    assert len(found.samples_per_s) == 2 and min(found.samples_per_s) <= found.middle <= max(found.samples_per_s)


def test_cells_tied_here_are_split_into_tied_there_and_behind():
    cells = merge_repeats(results())
    advice = rollout.predicted(cells[0], [v for v in results() if v.cell == cells[0].cell],
                               rollout.stated_host(cells[0])).advice
    best = rollout.Predicted(cells[0], [100.0, 110.0], [50.0, 55.0], advice)
    assert rollout._tied_there(best, dataclasses.replace(best, samples_per_s=[105.0, 120.0]), 0.05)  # overlap
    near = dataclasses.replace(best, samples_per_s=[100.0, 102.0])
    assert rollout._tied_there(near, dataclasses.replace(best, samples_per_s=[97.0, 99.0]), 0.05)  # within 5%
    assert not rollout._tied_there(best, dataclasses.replace(best, samples_per_s=[80.0, 90.0]), 0.05)


def test_a_run_without_the_costs_says_why_there_is_no_prediction():
    visits = [dataclasses.replace(v, ranks=[]) for v in results()]
    cells = merge_repeats(visits)
    got = rollout.rollout_lines(cells, visits, cells[:1], None, 0.05)
    assert got == ["ROLL OUT on 1 node(s) x 2 V100-16GB, 16 cores per node (a stated host: 8 cores per "
                   "accelerator; [target] sets yours): no prediction (no cell recorded the costs the model needs)"]


def _oversubscribed(visit, factor: float):
    """The visit as a host `factor` times more oversubscribed would record it: every wall-clock part of a
    step (the wait for data, the copy, the peer wait, the overhead) stretched, the rank process's other
    threads' CPU risen by half of the main thread's (as beside other work), the loader's and the main
    thread's CPU and the device figures as they were, the measured step imbalance and outside load risen."""
    ranks = [dataclasses.replace(r, wait=[x * factor for x in r.wait], h2d=[x * factor for x in r.h2d],
                                 overhead=[x * factor for x in r.overhead],
                                 peer_wait=[x * factor for x in r.peer_wait],
                                 rank_cpu_s=r.rank_cpu_s + 0.5 * (r.rank_main_cpu_s or 0.0)) for r in visit.ranks]
    extra = sum(0.5 * (r.rank_main_cpu_s or 0.0) for r in visit.ranks) / sum(r.samples for r in visit.ranks)
    figures = visit.figures.replace(step_imbalance=float(visit.figures.get("step_imbalance") or 1.0) * factor,
                                    other_cpu_pct=45.0,
                                    rank_cpu_s_per_sample=float(visit.figures.get("rank_cpu_s_per_sample")) + extra)
    return dataclasses.replace(visit, ranks=ranks, figures=figures)


def test_the_target_prediction_moves_with_this_hosts_load_only_through_the_agreements_floor():
    """The costs carried to a target (stages.for_target) hold CPU seconds, bytes and device time: stretching
    every wall-clock part of the visits three times (a loaded host) moves the target's rate by less than the
    model's own stated error, though the same stretch moves the costs as measured here by far more."""
    from harness.analysis.predictioninterval import MODEL_ERROR_SD
    from harness.analysis.targetmodel import predict
    from harness.config.accelerators import get_accelerator
    from harness.report.stagetable import target_costs

    visits = results()
    target = rollout.stated_host(merge_repeats(visits)[0])
    target = dataclasses.replace(target, workers_per_rank=4)  # enough workers that the device binds
    accelerator = get_accelerator(target.accelerator)
    for visit in visits:
        quiet = predict(target_costs(visit, target), target, accelerator).samples_per_s
        loaded = predict(target_costs(_oversubscribed(visit, 3.0), target), target, accelerator).samples_per_s
        assert abs(math.log(loaded / quiet)) < MODEL_ERROR_SD, (visit.cell, quiet, loaded)
    here = stages.costs(visits[0].ranks, visits[0].figures, "pixels")
    there = stages.costs(_oversubscribed(visits[0], 3.0).ranks, _oversubscribed(visits[0], 3.0).figures, "pixels")
    assert there.serial_step_s > 2.5 * here.serial_step_s  # as measured: the wall clock's, stretched


SHARED = Path(__file__).parent / "fixtures" / "run-4xV100-shared"  # 4 cells x 3 visits of a real 4xV100 run


def test_a_real_runs_loaded_visits_predict_the_target_as_its_quiet_ones():
    """A real 4xV100 run on the 2-core host beside other work (tests/fixtures/run-4xV100-shared: 4 cells, each
    with a visit under 5% outside load and visits at 18-53%): each loaded visit's ROLL OUT rate (its
    recommended configuration on the stated host) lies within the model's stated 90% error of the quiet
    visit's. Before the costs were carried to the target, the same visits moved by up to 45% (2637 to 1456)."""
    from harness.analysis.predictioninterval import LEVEL, MODEL_ERROR_DF, MODEL_ERROR_SD
    from harness.analysis.recommend import recommend
    from harness.config.accelerators import get_accelerator
    from harness.report.stagetable import target_costs
    from harness.results.stats import t_quantile

    visits = [v for v in rundir.read_results(SHARED) if v.measured]
    target = rollout.stated_host(merge_repeats(visits)[0])
    accelerator = get_accelerator(target.accelerator)
    stated = t_quantile(LEVEL, MODEL_ERROR_DF) * MODEL_ERROR_SD
    for cell in {v.cell for v in visits}:
        mine = sorted((v for v in visits if v.cell == cell), key=lambda v: v.figures.get("other_cpu_pct"))
        assert mine[0].figures.get("other_cpu_pct") < 5 and mine[-1].figures.get("other_cpu_pct") > 40
        rate = [recommend(target_costs(v, target), target, accelerator).samples_per_s for v in mine]
        assert all(abs(math.log(r / rate[0])) < stated for r in rate[1:]), (cell, rate)


def _shipped_targets():
    from harness.config import scenario as scenario_mod

    names = sorted(p.stem for p in (Path(__file__).parents[1] / "scenarios").glob("*.toml")
                   if p.stem != "accelerators")
    for name in names:
        try:
            sc = scenario_mod.load(name)
        except UsageError:  # a real-GPU scenario (count = "auto") on a host without one
            continue
        ranks = sc.world_size
        yield name, sc.accelerator, Target(gpus_per_node=ranks, cores_per_node=8.0 * ranks,
                                           accelerator=sc.accelerator.name, workers_per_rank=1,
                                           batch_size=sc.training.batch_size, name="stated")


@pytest.mark.parametrize("loader_ms, rank_ms, path_ms, imbalance", [
    (0.6, 0.3, 0.5, 1.0), (0.6, 0.3, 20.0, 1.4), (2.5, 0.4, 2.0, 1.1), (0.1, 0.05, 0.1, 1.0),
    (0.3, 1.5, 1.0, 1.2), (5.0, 0.2, 60.0, 1.6)])
def test_no_line_says_the_device_binds_at_an_au_that_contradicts_it(loader_ms, rank_ms, path_ms, imbalance):
    """Over the shipped scenarios' accelerators: where the device binds, its AU is what the step's path and
    the imbalance leave it (the three add to 100%), and the line names what takes the rest; where another
    bound binds, the line does not say the device does."""
    from harness.analysis.recommend import recommend
    from harness.analysis.targetmodel import Costs

    for name, accelerator, target in _shipped_targets():
        costs = Costs(workload="pixels", loader_s=loader_ms / 1e3, rank_s=rank_ms / 1e3,
                      padded_pixels_per_sample=160.0 * 160.0, serial_step_s=path_ms / 1e3,
                      step_imbalance=imbalance)
        advice = recommend(costs, target, accelerator)
        shot = rollout.Predicted(None, [advice.samples_per_s], [advice.au_pct], advice)
        said = rollout._rest(shot)
        if advice.next_limit == "device":
            assert advice.au_pct + advice.path_pct + advice.imbalance_pct == pytest.approx(100.0, abs=0.5), name
            if advice.au_pct < 99.5:
                assert "the rest of its time" in said and f"{advice.path_pct:.0f}% the step's path" in said
        else:
            assert "device binds" not in said, (name, said)
            assert advice.path_pct == advice.imbalance_pct == 0.0
