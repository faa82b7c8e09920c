"""harness.analysis.effects: the factorial fit recovers a known synthetic answer, passes absorb drift, and
interactions are found only where planted."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from harness.analysis.effects import Effect, Observation, fit_effects
from harness.results.cellresult import CellResult

ORDER = {"storage": ["raw", "mmap", "hdf5"], "cache": ["none", "lru"], "batching": ["fixed", "dynamic"],
         "sampler": ["default", "balanced"]}
TRUE = {("storage", "mmap"): 0.9, ("storage", "hdf5"): 1.1, ("cache", "lru"): 1.2,
        ("batching", "dynamic"): 1.5, ("sampler", "balanced"): 1.0}


def observations(passes=3, noise=0.02, drift=(1.0, 0.8, 1.15), interaction=1.0, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for block in range(passes):
        for combo in itertools.product(*ORDER.values()):
            levels = dict(zip(ORDER, combo))
            value = 1000.0 * drift[block % len(drift)]
            for (axis, level), ratio in TRUE.items():
                value *= ratio if levels[axis] == level else 1.0
            if levels["storage"] == "mmap" and levels["cache"] == "lru":
                value *= interaction
            out.append(Observation(levels, value * float(np.exp(rng.normal(0, noise))), block))
    return out


def by_level(effects, kind="main"):
    return {(e.axis, e.level): e for e in effects if e.kind == kind}


def test_the_fit_recovers_known_effects_with_intervals_that_cover_them():
    effects = by_level(fit_effects(observations(), ORDER))
    for key, ratio in TRUE.items():
        e = effects[key]
        assert e.low <= ratio <= e.high, (key, e)
        assert e.ratio == pytest.approx(ratio, rel=0.03)
        assert e.decided == (ratio != 1.0)
    assert effects[("storage", "raw")].ratio == 1.0 and effects[("storage", "raw")].reference == "raw"
    assert all(e.n == 72 for e in effects.values())


def test_drift_between_passes_does_not_leak_into_the_effects():
    # without the pass term, a 30% drift would be noise; with it the intervals stay narrow
    drifting = by_level(fit_effects(observations(drift=(1.0, 0.7, 1.3)), ORDER))
    assert drifting[("cache", "lru")].high / drifting[("cache", "lru")].low < 1.1


def test_a_planted_interaction_is_found_and_no_other():
    inter = [e for e in fit_effects(observations(interaction=1.3), ORDER) if e.kind == "interaction"]
    decided = [(e.axis, e.level) for e in inter if e.decided]
    assert decided == [("storage x cache", "mmap x lru")]
    (e,) = [e for e in inter if e.level == "mmap x lru"]
    assert e.ratio == pytest.approx(1.3, rel=0.05)
    assert not [e for e in fit_effects(observations(), ORDER) if e.kind == "interaction" and e.decided]


def test_too_few_observations_fit_no_interactions_and_no_single_level_axis():
    one_pass = fit_effects(observations(passes=1), ORDER | {"loader": ["workers"]})
    assert not [e for e in one_pass if e.kind == "interaction"]  # 24 points, 17 terms: too few df
    assert "loader" not in {e.axis for e in one_pass}


def test_a_missing_level_combination_still_fits_the_estimable_effects():
    obs = [o for o in observations() if not (o.levels["storage"] == "hdf5" and o.levels["cache"] == "lru")]
    effects = by_level(fit_effects(obs, ORDER))
    assert effects[("storage", "hdf5")].low <= 1.1 <= effects[("storage", "hdf5")].high
    assert effects[("cache", "lru")].low <= 1.2 <= effects[("cache", "lru")].high


def test_json_round_trip_and_bad_values_left_out():
    obs = observations(passes=2) + [Observation(dict.fromkeys(ORDER, "x"), 0.0), Observation({}, float("nan"))]
    effects = fit_effects(obs, ORDER, figure="au")
    assert all(Effect.from_json(e.to_json()) == e for e in effects) and effects[0].figure == "au"
    assert fit_effects([], ORDER) == []


def test_a_visit_under_extreme_load_is_left_out_of_the_fit_when_its_cell_has_a_usable_one():
    from harness.analysis.effects import observations as of_results

    def visit(cell_levels, thr, repeat, load):
        return CellResult.from_json({"cell": "/".join(cell_levels.values()), "strategies": cell_levels,
                                     "repeat": repeat, "figures": {"throughput": thr, "other_cpu_pct": load,
                                                                   "ranks": 1, "window_steps": 10}})

    a, b = {"storage": "raw"}, {"storage": "mmap"}
    results = [visit(a, 100.0, 0, 70.0), visit(a, 200.0, 1, 1.0), visit(b, 300.0, 0, 80.0)]
    kept = sorted((o.levels["storage"], o.value, o.block) for o in of_results(results, "throughput"))
    # raw's redo (pass 1 visited raw alone) takes its extreme visit's place and pass; mmap has no usable visit:
    # its extreme one stays
    assert kept == [("mmap", 300.0, 0), ("raw", 200.0, 0)]
    results[0].figures = results[0].figures.replace(other_cpu_pct=50.0)  # disturbed, not extreme: kept
    assert len(of_results(results, "throughput")) == 3


def test_a_figure_identical_in_every_cell_is_said_so_and_never_decided():
    from harness.analysis.effects import IDENTICAL

    same = [Observation(o.levels, 16.25, o.block) for o in observations()]  # e.g. emulated device memory
    effects = [e for e in fit_effects(same, ORDER) if e.level != e.reference]
    assert effects and all(e.identical and e.decision(0.05) == IDENTICAL for e in effects)
    # a few ulps of difference from the arithmetic is still identical (it came out "decided" before)
    wobble = [Observation(o.levels, 16.25 * (1 + 1e-15 * (i % 3)), o.block) for i, o in enumerate(same)]
    assert all(e.decision(0.05) == IDENTICAL for e in fit_effects(wobble, ORDER) if e.level != e.reference)


def test_a_reference_level_without_a_measured_visit_gives_way_to_the_first_measured_one():
    kept = [o for o in observations() if o.levels["storage"] != "raw"]  # every raw visit failed
    effects = by_level(fit_effects(kept, ORDER))
    hdf5 = effects[("storage", "hdf5")]
    assert hdf5.reference == "mmap" and abs(hdf5.ratio / (1.1 / 0.9) - 1) < 0.03  # the axis stays, against mmap
    assert ("storage", "raw") not in effects
