"""One definition of "tied" (harness.analysis.ties) for FASTEST, the budget and the ranking table: a run
with a cell whose interval is missing gets the same answer from all three."""
from __future__ import annotations

import math

import pytest

from harness.analysis import ties
from harness.analysis.budget import open_questions
from harness.report.articles import ranking_table
from harness.report.verdict import fastest_lines
from harness.results.cellresult import CellResult


def cell(cid: str, thr: float, ci) -> CellResult:
    return CellResult.from_json({"schema": 2, "cell": f"storage={cid}", "repeat": 0, "strategies": {"storage": cid},
                                 "elapsed_s": 2.0, "figures": {"throughput": thr, "throughput_ci": ci}})


RUN = [cell("raw", 1000.0, [990.0, 1010.0]),  # the leader
       cell("mmap", 995.0, [980.0, 1005.0]),  # overlaps the leader: tied
       cell("hdf5", 999.0, None),  # no interval: tied with none, whatever its point value
       cell("lmdb", 500.0, [490.0, 510.0])]  # wholly below: rank 3


def test_intervals_are_finite_pairs_of_measured_cells_only():
    assert ties.interval_of(cell("a", 1.0, [0.5, 1.5])) == ties.Interval(0.5, 1.5, "interval, method unknown")
    for bad in (None, [], [1.0], [0.5, math.nan], [0.5, math.inf], ["0.5", 1.5]):
        assert ties.interval_of(cell("a", 1.0, bad)) is None, bad


def test_fastest_the_budget_and_the_ranking_agree_on_a_run_with_a_missing_interval():
    leader, tied = ties.leader_and_tied(RUN)
    assert leader.cell == "storage=raw" and [c.cell for c in tied] == ["storage=mmap"]
    # FASTEST
    first, second = fastest_lines(RUN)
    assert first.startswith("FASTEST: raw at 1000 samples/s")
    assert second.startswith("  overlapping it: 1 of 3 other cells (") and second.endswith("): mmap")
    # the budget asks about the same tie (one pass: the paired ratio has no interval yet); hdf5, without an
    # interval, is never part of it
    assert sorted(open_questions(RUN, [c.cell for c in RUN]).tied) == ["storage=mmap", "storage=raw"]
    # the ranking table: raw and mmap tied at rank 1, hdf5 without a rank, lmdb 3rd (two cells wholly above)
    ranks = ties.tie_ranks(RUN)
    assert ranks == {"storage=raw": (1, True), "storage=mmap": (1, True), "storage=hdf5": (None, False),
                     "storage=lmdb": (3, False)}
    rows = {row[1]: row[0] for row in ranking_table(RUN).rows}
    assert rows == {"raw": "=1", "mmap": "=1", "hdf5": "-", "lmdb": "3"}


@pytest.mark.parametrize("leader_ci", [None, [math.nan, 1010.0]])
def test_a_leader_without_an_interval_is_tied_with_no_cell_in_all_three(leader_ci):
    run = [cell("raw", 1000.0, leader_ci), cell("mmap", 995.0, [980.0, 1005.0]), cell("lmdb", 500.0, [490, 510])]
    assert ties.leader_and_tied(run)[1] == []
    assert fastest_lines(run)[1].startswith("  overlapping it: 0 of 2 other cells (")
    assert open_questions(run, [c.cell for c in run]).tied == []
    assert ties.tie_ranks(run)["storage=raw"] == (None, False)


def test_a_tied_cell_is_settled_by_its_ratio_to_the_leader_paired_by_pass():
    def visit(cid, thr, repeat):
        return CellResult.from_json({"schema": 2, "cell": f"storage={cid}", "repeat": repeat,
                                     "strategies": {"storage": cid}, "figures": {"throughput": thr}})

    drift = [1.0, 1.3, 0.8, 1.1]  # the machine's speed per pass: cancels in the paired ratio
    same = [visit(c, 1000 * d * (1.0 if c == "raw" else 0.99 + 0.01 * (i % 2)), i)
            for i, d in enumerate(drift) for c in ("raw", "mmap")]
    iv = ties.paired_ratio(same, "storage=mmap", "storage=raw")
    assert 0.97 < iv.low < iv.high < 1.02 and iv.label == "paired by pass, n=4"
    assert ties.settled(same, "storage=mmap", "storage=raw", 0.05)
    assert not ties.settled(same, "storage=mmap", "storage=raw", 0.001)
    slower = [visit(c, 1000 * d * (1.0 if c == "raw" else 0.9), i) for i, d in enumerate(drift)
              for c in ("raw", "mmap")]
    assert ties.settled(slower, "storage=mmap", "storage=raw", 0.01)  # decidedly slower
    assert ties.paired_ratio(same[:2], "storage=mmap", "storage=raw") is None  # one pass
