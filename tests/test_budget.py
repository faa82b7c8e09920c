"""harness.analysis.budget: where a --budget's next pass goes (a racing design), on synthetic cell lines."""
from __future__ import annotations

import numpy as np

from harness.analysis.budget import ending, next_pass, open_questions
from harness.analysis.effects import Effect
from harness.report.verdict import passes_to_decide
from harness.results.cellresult import CellResult

IDS = ["storage=raw", "storage=mmap", "storage=hdf5"]


def lines(ratios: dict[str, float], passes: int, noise: float, seed: int = 0, width: float = 0.02):
    rng = np.random.default_rng(seed)
    out = []
    for repeat in range(passes):
        for cid in IDS:
            thr = 1000.0 * ratios[cid] * float(np.exp(rng.normal(0, noise)))
            out.append(CellResult.from_json({
                "schema": 2, "cell": cid, "repeat": repeat, "strategies": {"storage": cid.split("=")[1]},
                "elapsed_s": 2.0, "figures": {"throughput": thr, "throughput_ci": [thr * (1 - width),
                                                                                   thr * (1 + width)]}}))
    return out


def test_an_open_effect_sends_the_next_pass_to_every_cell():
    noisy = lines({"storage=raw": 1.0, "storage=mmap": 1.04, "storage=hdf5": 1.3}, passes=2, noise=0.08)
    q = open_questions(noisy, IDS)
    assert "storage=mmap" in q.effects and not q.decided
    assert next_pass(noisy, IDS, seconds_left=100.0) == [0, 1, 2]
    assert next_pass(noisy, IDS, seconds_left=5.0) == []  # 3 visits of 2 s do not fit


def test_the_fastest_set_is_reported_when_the_run_ends_and_never_holds_it():
    # mmap and hdf5 both clearly faster than raw (decided), and the same speed: tied
    clear = lines({"storage=raw": 1.0, "storage=mmap": 1.5, "storage=hdf5": 1.5}, passes=4, noise=0.002)
    q = open_questions(clear, IDS)
    assert q.effects == [] and q.tied == []  # each end within 5% of the other's: as fast, settled
    assert ending(clear, IDS, 100.0, 4).endswith("the fastest set is settled")
    wide = lines({"storage=raw": 1.0, "storage=mmap": 1.5, "storage=hdf5": 1.5}, passes=4, noise=0.03,
                 width=0.06)
    q = open_questions(wide, IDS)
    assert q.effects == [] and sorted(q.tied) == ["storage=hdf5", "storage=mmap"]
    assert q.decided and next_pass(wide, IDS, seconds_left=100.0) == []  # the tie does not hold the run
    assert "1 cell(s) tied with the leader and not within 5% of it (reported, not waited for)" in ending(
        wide, IDS, 100.0, 4)


def test_no_look_left_ends_the_run_with_its_effects_open():
    """The stopping rule's last look is after whole pass 5: an effect still open then stays open."""
    noisy = lines({"storage=raw": 1.0, "storage=mmap": 1.04, "storage=hdf5": 1.3}, passes=5, noise=0.08)
    q = open_questions(noisy, IDS)
    assert "storage=mmap" in q.effects and q.looks_left == 0
    assert next_pass(noisy, IDS, seconds_left=1e6) == []
    assert "the stopping rule's last look is taken" in ending(noisy, IDS, 1e6, 5)
    assert open_questions(noisy[:12], IDS).looks_left == 0 + 1  # 4 passes: the look after pass 5 is left


def test_nothing_open_ends_the_budget():
    apart = lines({"storage=raw": 1.0, "storage=mmap": 1.5, "storage=hdf5": 2.0}, passes=4, noise=0.002)
    assert open_questions(apart, IDS).decided and next_pass(apart, IDS, seconds_left=1e6) == []
    assert ending(apart, IDS, 1e6, 4).endswith("every effect is decided; the fastest set is settled")


def test_a_budget_that_ends_open_says_what_stays_open_and_why():
    noisy = lines({"storage=raw": 1.0, "storage=mmap": 1.04, "storage=hdf5": 1.3}, passes=2, noise=0.08)
    said = ending(noisy, IDS, 5.0, 2)
    assert "storage=mmap" in said and "stay open" in said and "a pass takes about 6 s and 5 s are left" in said


def test_passes_to_decide_comes_from_80_percent_power_in_whole_passes():
    # x1.02 [0.98, 1.06] after 1 pass, m = 5%: nearer 1 than m/2, so projected towards "no effect larger than
    # 5%": se 0.020 on the log scale, room log(1.05) - log(1.02) = 0.029: 1 * (2.80 * 0.020 / 0.029)^2 = 3.7
    assert passes_to_decide(Effect("throughput", "storage", "mmap", "raw", 1.02, 0.98, 1.06, 24), 1) == 4
    # x1.00 [0.90, 1.10] after 3 passes: 3 * (2.80 * 0.051 / 0.049)^2 = 25.7
    assert passes_to_decide(Effect("throughput", "storage", "mmap", "raw", 1.0, 0.9, 1.1, 24), 3) == 26
    # x1.20 [1.00, 1.44] after 2 passes, towards "higher": 2 * (2.80 * 0.093 / 0.182)^2 = 4.1
    assert passes_to_decide(Effect("throughput", "storage", "mmap", "raw", 1.2, 1.0, 1.44, 24), 2) == 5
    assert passes_to_decide(Effect("throughput", "storage", "mmap", "raw", 1.0, 1.0, 1.0, 24), 2) is None


def test_a_disturbed_visit_is_kept_and_one_under_extreme_load_leaves_the_fit():
    from harness.analysis.effects import observations

    apart = lines({"storage=raw": 1.0, "storage=mmap": 1.5, "storage=hdf5": 2.0}, passes=4, noise=0.002)
    apart[10].figures = apart[10].figures.replace(other_cpu_pct=40.0)  # the last pass's visit of mmap
    assert len(observations(apart, "throughput", adjust=True)) == 12  # kept, adjusted for
    assert open_questions(apart, IDS).decided and next_pass(apart, IDS, seconds_left=100.0) == []  # no redo
    apart[10].figures = apart[10].figures.replace(other_cpu_pct=61.0)  # extreme: out of the fit
    assert len(observations(apart, "throughput", adjust=True)) == 11
    apart[10].figures = apart[10].figures.replace(other_cpu_pct=0.0, steal_pct=6.0)  # steal above 5%: out too
    assert len(observations(apart, "throughput", adjust=True)) == 11


def test_one_pass_decides_nothing_and_the_budget_spends_its_first_pass_on_a_second():
    """One visit per cell: the interval rests on one run's residuals and misses what changes from run to run
    (two same-code runs of 4xV100 once decided mmap against raw in opposite directions), so a clear effect
    waits for a second pass, and a budget's first pass is that second pass, over every cell."""
    from harness.report.verdict import effect_lines

    drift = lines({"storage=raw": 1.0, "storage=mmap": 1.5, "storage=hdf5": 2.0}, passes=2, noise=0.002)
    one = [CellResult.from_json({**r.to_json(), "repeat": 0}) for r in drift]  # the same visits as one pass
    assert sorted(open_questions(one, IDS).effects) == ["storage=hdf5", "storage=mmap"]
    assert next_pass(one, IDS, seconds_left=100.0) == [0, 1, 2]
    assert open_questions(drift, IDS).effects == []  # two passes: decided
    mmap = Effect("throughput", "storage", "mmap", "raw", 1.5, 1.45, 1.55, 3)
    (line,) = [x for x in effect_lines([mmap], passes=1) if "storage=mmap" in x]
    assert "open (decided higher on 1 pass" in line and "waits for a second pass" in line
    assert "higher" in [x for x in effect_lines([mmap], passes=2) if "storage=mmap" in x][0]
