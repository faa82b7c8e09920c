"""harness.analysis.budget: where a --budget's next pass goes (a racing design), on synthetic cell lines."""
from __future__ import annotations

import numpy as np

from harness.analysis.budget import next_pass, open_questions
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


def test_decided_effects_leave_only_the_cells_tied_with_the_leader():
    # mmap and hdf5 both clearly faster than raw (decided), and the same speed: tied
    clear = lines({"storage=raw": 1.0, "storage=mmap": 1.5, "storage=hdf5": 1.5}, passes=4, noise=0.002)
    q = open_questions(clear, IDS)
    assert q.effects == [] and sorted(q.tied) == ["storage=hdf5", "storage=mmap"]
    assert sorted(next_pass(clear, IDS, seconds_left=100.0)) == [1, 2]


def test_nothing_open_ends_the_budget():
    apart = lines({"storage=raw": 1.0, "storage=mmap": 1.5, "storage=hdf5": 2.0}, passes=4, noise=0.002)
    assert open_questions(apart, IDS).decided and next_pass(apart, IDS, seconds_left=1e6) == []


def test_passes_to_decide_grows_as_the_interval_narrows_with_the_square_root():
    e = Effect("throughput", "storage", "mmap", "raw", 1.02, 0.98, 1.06, 24)
    need = passes_to_decide(e, 1)
    assert 3 <= need <= 6  # half-width 0.039 against a distance of 0.0198: (0.039 / 0.0198)^2 = 3.9 passes
    assert passes_to_decide(Effect("throughput", "storage", "mmap", "raw", 1.0, 0.9, 1.1, 24), 3) is None


def test_a_visit_disturbed_by_outside_load_is_owed_a_new_visit():
    apart = lines({"storage=raw": 1.0, "storage=mmap": 1.5, "storage=hdf5": 2.0}, passes=4, noise=0.002)
    apart[10].figures = apart[10].figures.replace(other_cpu_pct=40.0)  # the last pass's visit of mmap
    assert open_questions(apart, IDS).decided
    assert next_pass(apart, IDS, seconds_left=100.0) == [1]
    redone = apart + lines({"storage=raw": 1.0, "storage=mmap": 1.5, "storage=hdf5": 2.0}, passes=5,
                           noise=0.002)[-2:-1]  # one undisturbed visit of mmap afterwards
    redone[-1].repeat = 4
    assert next_pass(redone, IDS, seconds_left=100.0) == []
