"""What a cell's order costs on the first screen (harness.report.ordercost): FASTEST names the leader's cost, and
ROLL OUT never picks a cell whose order is decided less random than a shuffle beyond --order-tolerance without
saying so. On the real smoke run of tests/test_rollout.py, with a sequential read's order figures planted in one
cell's visits."""
from __future__ import annotations

import dataclasses

from harness.analysis.ties import leader_and_tied
from harness.report import ordercost, rollout, verdict
from harness.results.repeats import merge_repeats
from tests.test_rollout import results

SHUFFLE = dict(order_units_per_batch=20.0, order_units_ideal=20.1, order_units_ideal_sd=0.3, order_units_ratio=0.995,
               order_position_rho=0.001, order_position_ideal_sd=0.02, order_position_mixing=0.999)
# a whole-shard read: one unit per batch against a shuffle's 20, storage order kept (rho 1)
IN_ORDER = dict(order_units_per_batch=1.0, order_units_ideal=20.1, order_units_ideal_sd=0.3, order_units_ratio=0.05,
                order_position_rho=1.0, order_position_ideal_sd=0.02, order_position_mixing=0.0)


def planted(cell_id: str, figures: dict, others: dict = SHUFFLE):
    return [dataclasses.replace(v, figures=dataclasses.replace(v.figures, **(figures if v.cell == cell_id else others)))
            for v in results()]


def fastest_there(visits) -> str:
    cells = merge_repeats(visits)
    target = rollout.stated_host(cells[0])
    found = [rollout.predicted(c, [v for v in visits if v.cell == c.cell], target) for c in cells]
    return max(found, key=lambda p: p.middle).cell.cell


def rolled_out(line: str) -> str:
    """The cell a ROLL OUT line names (after the target's description, before its settings)."""
    return line.split("yours): ", 1)[1].split(" with ")[0]


def roll(visits, tolerance):
    cells = merge_repeats(visits)
    leader, tied = leader_and_tied(cells)
    return rollout.rollout_lines(cells, visits, [leader, *tied], None, 0.05, tolerance)


def test_a_shuffle_and_an_order_within_the_tolerance_cost_nothing():
    cell = merge_repeats(planted("none", {}))[0]
    assert ordercost.order_costs(cell, 0.10) == []  # every cell as a shuffle
    near = dict(IN_ORDER, order_units_per_batch=19.0, order_units_ratio=0.945, order_position_rho=0.001,
                order_position_mixing=0.999)  # decided less mixed (19 vs 20.1 +- 0.3), but only 5.5% fewer units
    cell = merge_repeats(planted(results()[0].cell, near))[0]
    assert ordercost.order_costs(cell, 0.10) == []
    assert ordercost.order_costs(cell, 0.05) == ["storage units met per batch x0.94 of a shuffle's"]


def test_a_sequential_order_and_a_worse_training_are_named():
    first = results()[0].cell
    cell = merge_repeats(planted(first, IN_ORDER))[0]
    assert ordercost.order_costs(cell, 0.10) == ["storage units met per batch x0.05 of a shuffle's",
                                                 "position mixing (1 - |rho|) x0.00 of a shuffle's"]
    trained = dict(SHUFFLE, order_train_steps=16, order_train_ratio=1.3, order_train_ratio_low=1.2)
    cell = merge_repeats(planted(first, trained))[0]
    assert ordercost.order_costs(cell, 0.10) == ["held-out loss x1.30 of a shuffle's after 16 steps"]
    assert ordercost.order_costs(cell, 0.25) == []  # its interval reaches below 1.25


def test_fastest_names_the_leaders_order_cost():
    visits = results()
    leader, _ = leader_and_tied(merge_repeats(visits))
    lines = verdict.fastest_lines(merge_repeats(planted(leader.cell, IN_ORDER)), 0.10)
    assert lines[0].startswith("FASTEST") and lines[1].startswith("  its order: storage units met per batch x0.05")
    assert "--order-tolerance 10%" in lines[1]
    assert not any("its order" in line for line in verdict.fastest_lines(merge_repeats(planted(leader.cell, {})),
                                                                          0.10))


def test_roll_out_passes_over_a_faster_cell_whose_order_costs_more_than_the_tolerance():
    quick = fastest_there(results())
    visits = planted(quick, IN_ORDER)
    lines = roll(visits, 0.10)
    label = quick.split(",")[0]  # the smoke matrix differs in storage alone: the label names it
    assert label.split("=")[1] not in rolled_out(lines[0])  # another cell is rolled out
    said = next(line for line in lines if line.startswith("  passed over:"))
    assert label.split("=")[1] in said and "for its order: storage units met per batch x0.05" in said
    allowed = roll(visits, 1.0)  # --order-tolerance 1: the order never counts
    assert label.split("=")[1] in rolled_out(allowed[0]) and not any("passed over" in x for x in allowed)


def test_where_every_cells_order_costs_the_fastest_is_rolled_out_and_says_so():
    tolerance = 0.10
    visits = [dataclasses.replace(v, figures=dataclasses.replace(v.figures, **IN_ORDER)) for v in results()]
    lines = roll(visits, tolerance)
    assert any(line.startswith("  its order:") and "no cell's order is within it" in line for line in lines)


def test_the_tolerance_is_a_fraction_recorded_in_env_json(tmp_path):
    import argparse

    from harness.cli import parsers
    from harness.results.environment import Environment

    assert parsers.order_tolerance("0.25") == 0.25 and parsers.order_tolerance("1") == 1.0
    for bad in ("2", "-0.1", "nan", "ten"):
        try:
            parsers.order_tolerance(bad)
        except argparse.ArgumentTypeError as err:
            assert "fraction from 0 to 1" in str(err)
        else:
            raise AssertionError(f"{bad} was accepted")
    env = Environment(order_tolerance=0.25)
    assert ordercost.tolerance_of(Environment.from_json(env.to_json())) == 0.25
    assert ordercost.tolerance_of(Environment()) == ordercost.TOLERANCE  # a run from before the option
