"""ROLL OUT (harness.report.rollout): the configuration to use on the target, right after FASTEST, from a real
smoke run of two passes (tests/fixtures/run-smoke-2passes/cells.jsonl: 3 storages x 2 visits x 2 ranks, with the
stage costs the target model needs)."""
from __future__ import annotations

import dataclasses
from pathlib import Path

from harness.analysis.intervals import leader_and_tied
from harness.config.target import Target
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
    assert "over 2 visits" in head  # the range over the visits, not a point


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
