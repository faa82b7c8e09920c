"""harness.results.baselinefile and harness.gates.baseline: baselines on disk, verdicts and exit codes on planted
changes, rendering."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest

from harness.gates import baseline as cmp
from harness.gates.table import render as render_comparison
from harness.results.baselinefile import Baseline, BaselineError
from harness.results.cellresult import CellResult, Figures
from harness.results.environment import Environment
from harness.results.probeline import ProbeSeries

ENV = Environment.from_json({"cpu_model": "AMD EPYC", "cpu_count": 2, "hostname": "vm", "memory_gb": 25.3,
       "versions": {"numpy": "2.4.6"}, "git": {"commit": "abc", "dirty": False},
       "device": {"accelerator": "V100-16GB", "mode": "emulated", "world_size": 2}})
COMPARABLE = {"dataset_key": "0123456789ab", "world_size": 2, "workload": "pixels", "batch_size": 8,
              "accelerator": "V100-16GB", "emulated": True}
CELLS = ["storage=raw,cache=none", "storage=hdf5,cache=none", "storage=mmap,cache=lru"]
BASE_TP = {c: 100.0 * (i + 1) for i, c in enumerate(CELLS)}


def run(factors=None, repeats=5, noise=0.005, seed=0, machine=1.0, cells=CELLS, errors=(), env=ENV,
        comparable=COMPARABLE, scenario="ci", probe_noise=None):
    """A baseline-shaped run: each cell's throughput = base x factor x machine speed x (1 + noise); the probe
    = 1000 x machine speed x (1 + probe_noise, default: noise)."""
    rng = np.random.default_rng(seed)
    factors = factors or {}
    lines = []
    spread = noise if probe_noise is None else probe_noise
    ideal = [1000.0 * machine * (1 + rng.normal(0, spread)) for _ in range(repeats)]
    for rep in range(repeats):
        for c in cells:
            tp = BASE_TP.get(c, 50.0) * factors.get(c, 1.0) * machine * (1 + rng.normal(0, noise))
            lines.append(CellResult(c, repeat=rep, error="OOM: batch too big" if c in errors else None,
                                    figures=Figures(throughput=tp, step_p50_ms=1000.0 / tp)))
    probe = ProbeSeries(ideal, [10.0 * machine] * repeats, list(ideal))  # per CPU second as per wall second
    return Baseline.from_run(lines, env, probe, comparable, scenario, created="2026-01-01T00:00:00Z")


def verdicts(comparison):
    return {r.cell: r.verdict for r in comparison.rows}


def test_build_baseline_shape():
    b = run(repeats=3).to_json()
    assert b["format"] == "dlbench-baseline/1" and b["scenario"] == "ci" and b["comparable"] == COMPARABLE
    assert b["machine"] == {"cpu_model": "AMD EPYC", "cpu_count": 2, "hostname": "vm", "memory_gb": 25.3}
    cell = b["cells"][CELLS[0]]
    assert len(cell["throughput"]) == len(cell["normalised"]) == len(cell["step_p50_ms"]) == 3
    ideal = b["probe"]["ideal_samples_per_s"]
    assert cell["normalised"] == pytest.approx([t / i for t, i in zip(cell["throughput"], ideal)])
    assert cell["error"] is None
    assert Baseline.from_json(json.loads(json.dumps(b))).to_json() == b  # round trip


def test_build_baseline_orders_by_repeat_and_keeps_errors():
    lines = [CellResult.from_json(line) for line in [
        {"cell": "a", "repeat": 1, "error": None, "figures": {"throughput": 20.0, "step_p50_ms": 1.0}},
        {"cell": "a", "repeat": 0, "error": None, "figures": {"throughput": 10.0, "step_p50_ms": 2.0}},
        {"cell": "b", "repeat": 0, "error": "OOM", "figures": {}}]]
    b = Baseline.from_run(lines, ENV, ProbeSeries([100.0, 200.0]), COMPARABLE, "ci").to_json()
    assert b["cells"]["a"]["throughput"] == [10.0, 20.0]
    assert b["cells"]["a"]["normalised"] == [0.1, 0.1]
    assert b["cells"]["b"] == {"throughput": [], "normalised": [], "step_p50_ms": [], "error": "OOM",
                               "params": {}}
    with pytest.raises(ValueError, match="repeat 1"):
        Baseline.from_run(lines, ENV, ProbeSeries([100.0]), COMPARABLE, "ci")
    with pytest.raises(ValueError, match="two results for repeat 0"):
        Baseline.from_run(lines + lines[1:2], ENV, ProbeSeries([100.0, 200.0]), COMPARABLE, "ci")
    no_figures = CellResult("c", figures=Figures(ranks=2, window_steps=0))  # no error, yet no throughput
    with pytest.raises(ValueError, match="cell c repeat 0 has no error and no throughput"):
        Baseline.from_run([no_figures], ENV, ProbeSeries([100.0]), COMPARABLE, "ci")


def test_save_and_load_round_trip(tmp_path):
    b = run()
    path = tmp_path / "baselines" / "ci.json"
    b.save(path)
    assert Baseline.load(path) == b


def test_identical_runs_are_unchanged():
    c = cmp.compare(run(seed=1), run(seed=1))
    assert set(verdicts(c).values()) == {"unchanged"} and c.exit_code == 0
    assert all(r.ratio == pytest.approx(1.0) and r.p == pytest.approx(1.0) for r in c.rows)


def test_same_setup_other_noise_is_unchanged():
    c = cmp.compare(run(seed=2), run(seed=1))
    assert set(verdicts(c).values()) == {"unchanged"} and c.exit_code == 0


def test_planted_regression_is_slower():
    c = cmp.compare(run({CELLS[1]: 0.8}, seed=2), run(seed=1))
    assert verdicts(c) == {CELLS[0]: "unchanged", CELLS[1]: "slower", CELLS[2]: "unchanged"}
    row = c.rows[1]
    assert row.ratio == pytest.approx(0.8, abs=0.02) and row.p < 0.05
    assert c.exit_code == 1


def test_planted_speed_up_is_faster():
    c = cmp.compare(run({CELLS[0]: 1.2}, seed=2), run(seed=1))
    assert verdicts(c)[CELLS[0]] == "faster" and c.exit_code == 0


def test_small_significant_change_is_unchanged():
    c = cmp.compare(run({CELLS[0]: 0.98}, noise=0.0001, seed=2), run(noise=0.0001, seed=1))
    row = c.rows[0]
    assert row.p < 0.05 and row.verdict == "unchanged" and row.note == "below min effect"
    assert c.exit_code == 0


def test_too_few_repeats_are_inconclusive_not_a_regression():
    one = cmp.compare(run({CELLS[0]: 0.92, CELLS[1]: 0.85}, repeats=1, seed=2), run(repeats=1, seed=1))
    assert set(verdicts(one).values()) == {"inconclusive"} and one.exit_code == 0
    assert one.rows[1].p is None and one.rows[1].ratio == pytest.approx(0.85, rel=0.02)
    assert one.rows[0].note == "1 vs 1 repeats: no rank test can reach p<0.05"
    (warning,) = one.warnings
    assert warning.startswith("3 cell(s) inconclusive: 1 vs 1 repeats cannot reach p<0.05")
    assert "too few for any run" in warning and "largest drop -15" in warning and "--strict" in warning
    assert "3 inconclusive" in one.summary_line()
    # --strict turns inconclusive into a failure
    strict = cmp.compare(run({CELLS[0]: 0.92}, repeats=1, seed=2), run(repeats=1, seed=1), strict=True)
    assert strict.exit_code == 1 and "fails under --strict" in strict.warnings[0]
    assert strict.summary_line().endswith("alpha 0.05, strict)")
    # 3 vs 3 repeats can never reach p < 0.05 (at best 0.1): inconclusive; 5 vs 3 can (2 / C(8, 3) = 0.036)
    three = cmp.compare(run({CELLS[1]: 0.85}, repeats=3, seed=2), run(repeats=3, seed=1))
    assert verdicts(three)[CELLS[1]] == "inconclusive" and three.exit_code == 0
    assert "needs --repeats 5 or more against the baseline's 3" in three.warnings[0]
    # against a 10-repeat baseline, 2 repeats already can: 2 / C(12, 2) = 0.03
    assert cmp.needed_repeats(10, 0.05) == 2 and cmp.needed_repeats(1, 0.05) is None
    two = cmp.compare(run({CELLS[1]: 0.8}, repeats=2, seed=2), run(repeats=10, seed=1))
    assert verdicts(two)[CELLS[1]] == "slower" and two.exit_code == 1


def test_the_same_code_twice_with_one_repeat_does_not_cry_wolf():
    """--save-baseline then --baseline, 1 repeat each, noise up to 30% (the probe's 2%): never exit 1."""
    for seed in range(20):
        c = cmp.compare(run(repeats=1, noise=0.3, seed=seed + 100, probe_noise=0.02),
                        run(repeats=1, noise=0.3, seed=seed, probe_noise=0.02))
        assert c.exit_code == 0 and "slower" not in verdicts(c).values()


def with_params(baseline: Baseline, cell: str, params) -> Baseline:
    out = Baseline.from_json(json.loads(json.dumps(baseline.to_json())))
    out.cells[cell].params = params
    return out


def test_a_cell_whose_parameters_differ_is_not_compared():
    base = run(seed=1)
    current = with_params(run({CELLS[0]: 0.5}, seed=2), CELLS[0], {"cache": {"capacity_mb": 8}})
    c = cmp.compare(current, base)
    assert verdicts(c)[CELLS[0]] == "not comparable" and c.exit_code == 0
    assert c.rows[0].note == "parameters differ: cache baseline None, this run {'capacity_mb': 8}"
    assert any("1 cell(s) not compared" in w for w in c.warnings)
    # a side that does not record params (an older baseline): matched by id, one warning
    old = with_params(base, CELLS[0], None)
    c = cmp.compare(run(seed=2), old)
    assert verdicts(c)[CELLS[0]] == "unchanged"
    assert any("does not record the strategies' parameters" in w for w in c.warnings)


def test_an_old_baseline_without_the_new_keys_is_compared_on_the_shared_ones():
    new = dict(COMPARABLE, device="V100-16GB (emulated)", image_size=160, steps=30, epochs=0, warmup_steps=3,
               workers=1, prefetch_factor=2, cache_state="as-is")
    c = cmp.compare(run(seed=2, comparable=new), run(seed=1))
    assert c.exit_code == 0 and set(verdicts(c).values()) == {"unchanged"}
    (warning,) = c.warnings
    assert warning.startswith("the baseline does not record cache_state, device, epochs, image_size, "
                              "prefetch_factor, steps, warmup_steps, workers (an older baseline): compared on "
                              "the 6 settings both record")
    with pytest.raises(BaselineError, match="baseline is for cache_state=cold, this run has as-is"):
        cmp.compare(run(comparable=new), run(comparable=dict(new, cache_state="cold")))
    with pytest.raises(BaselineError, match="baseline is for device=NVIDIA H100, this run has V100"):
        cmp.compare(run(comparable=new), run(comparable=dict(new, device="NVIDIA H100")))


def test_the_committed_baseline_still_loads_and_compares():
    from conftest import REPO

    base = Baseline.load(REPO / "results" / "baselines" / "ci.json")
    c = cmp.compare(Baseline.from_json(json.loads(json.dumps(base.to_json()))), base)
    assert c.exit_code == 0 and set(verdicts(c).values()) <= {"unchanged", "new", "error"}


def test_new_and_missing_cells():
    c = cmp.compare(run(cells=CELLS[:2] + ["storage=raw,cache=lru"], seed=2), run(seed=1))
    v = verdicts(c)
    assert v[CELLS[2]] == "missing" and v["storage=raw,cache=lru"] == "new"
    assert c.exit_code == 0  # missing is reported, not a regression


def test_errored_cell_is_a_regression():
    c = cmp.compare(run(errors={CELLS[0]}, seed=2), run(seed=1))
    assert verdicts(c)[CELLS[0]] == "error" and "OOM" in c.rows[0].note and c.exit_code == 1


def test_cell_errored_in_both_is_not_a_regression_and_a_fixed_one_is_new():
    c = cmp.compare(run(errors={CELLS[0]}, seed=2), run(errors={CELLS[0]}, seed=1))
    assert verdicts(c)[CELLS[0]] == "error" and c.exit_code == 0
    fixed = cmp.compare(run(seed=2), run(errors={CELLS[0]}, seed=1))
    assert verdicts(fixed)[CELLS[0]] == "new" and fixed.exit_code == 0


@pytest.mark.parametrize("key, value, words", [
    ("world_size", 4, "baseline is for world_size=2, this run has 4"),
    ("dataset_key", "ffffffffffff", "baseline is for dataset_key=0123456789ab, this run has ffffffffffff"),
    ("emulated", False, "baseline is for emulated=true, this run has false"),
])
def test_non_comparable_baseline(key, value, words):
    with pytest.raises(BaselineError) as err:
        cmp.compare(run(comparable={**COMPARABLE, key: value}), run())
    assert words in str(err.value) and "\n" not in str(err.value)


def test_other_scenario_is_not_comparable():
    with pytest.raises(BaselineError, match="scenario ci, this run is smoke"):
        cmp.compare(run(scenario="smoke"), run())


def test_load_errors_name_the_file_and_the_remedy(tmp_path):
    missing = tmp_path / "nope.json"
    with pytest.raises(BaselineError, match="nope.json does not exist; create it with --save-baseline"):
        Baseline.load(missing)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(BaselineError, match="bad.json is not valid JSON.*--save-baseline"):
        Baseline.load(bad)
    for i, obj in enumerate([{"format": "dlbench-baseline/9", "scenario": "ci", "comparable": {}, "cells": {}},
                             {"scenario": "ci"}, [1, 2], {"format": "dlbench-baseline/1", "scenario": "ci"}]):
        path = tmp_path / f"odd{i}.json"
        path.write_text(json.dumps(obj))
        with pytest.raises(BaselineError) as err:
            Baseline.load(path)
        assert f"odd{i}.json" in str(err.value) and "--save-baseline" in str(err.value)
        assert "\n" not in str(err.value)


def test_a_faster_machine_is_not_comparable_even_normalised():
    """A machine twice as fast (probe and cells) with 64 CPUs: refused for every metric, normalised included."""
    other = Environment.from_json(dict(ENV.to_json(), hostname="big", cpu_count=64))
    fast = run(machine=2.0, seed=2, env=other)
    for kwargs in ({}, {"raw": True}, {"metric": "cpu"}):
        with pytest.raises(BaselineError) as err:
            cmp.compare(fast, run(seed=1), **kwargs)
        assert "CPU count 2 there, 64 here" in str(err.value) and "\n" not in str(err.value)


def on(cpu_model="AMD EPYC", cpu_affinity=2, **other):
    """ENV on another machine: its CPU model, the cores the run was allowed and any other machine key."""
    return Environment.from_json(dict(ENV.to_json(), cpu_model=cpu_model, cpu_affinity=cpu_affinity, **other))


@pytest.mark.parametrize("metric, raw", [("cpu", False), ("throughput", False), ("throughput", True)])
def test_a_baseline_from_another_cpu_model_is_refused_for_every_metric(metric, raw):
    """The issue: an AMD EPYC run against an Intel Xeon baseline, the same code; the CPU metric was compared
    across the machines silently (6 of 6 cells "slower"), raw throughput only warned."""
    current = cpu_run(1.5, CELLS[0], seed=2, env=on())
    baseline = cpu_run(seed=1, env=on(cpu_model="Intel(R) Xeon(R) Processor"))
    with pytest.raises(BaselineError) as err:
        cmp.compare(current, baseline, raw=raw, metric=metric)
    line = str(err.value)
    assert line.startswith("the baseline is from another machine: CPU model Intel(R) Xeon(R) Processor there, "
                           "AMD EPYC here;") and "\n" not in line
    assert "--save-baseline" in line and "bash scripts/ci_gate.sh" in line  # the two remedies


def test_fewer_allowed_cores_are_another_machine():
    with pytest.raises(BaselineError, match="cores allowed 2 there, 1 here"):
        cmp.compare(run(seed=2, env=on(cpu_affinity=1)), run(seed=1, env=on()))


def test_a_fresh_hostname_and_more_memory_alone_are_the_same_machine():
    """CI machines of one kind have fresh hostnames; memory does not change the code's CPU cost per sample."""
    c = cmp.compare(run(seed=2, env=on(hostname="ci-runner-7f3a", memory_gb=64.0)), run(seed=1, env=on()))
    assert c.exit_code == 0 and set(verdicts(c).values()) == {"unchanged"} and not c.warnings


@pytest.mark.parametrize("key, factor, refused", [
    ("ideal_cpu_samples_per_s", 0.35, True), ("ideal_cpu_samples_per_s", 2.8, True),
    ("ideal_cpu_samples_per_s", 0.4, False), ("ideal_cpu_samples_per_s", 2.5, False),
    ("memcpy_gb_s", 0.57, True), ("memcpy_gb_s", 1.75, True), ("memcpy_gb_s", 0.62, False),
    ("memcpy_gb_s", 1.65, False),
    ("ideal_samples_per_s", 0.1, False), ("ideal_samples_per_s", 10.0, False)])  # the load's as much: unchecked
def test_a_probe_beyond_its_measured_spread_is_another_machine(key, factor, refused):
    """Same CPU model and cores, one probe figure x`factor`: beyond its measured spread on one machine
    (PROBE_SPREAD: x2.7 per CPU second, x1.7 the memory copy) the baseline is refused for every metric, within
    it compared; the wall-clock ideal loader is not checked."""
    current, baseline = run(seed=2, env=on(), probe_noise=0), run(seed=1, env=on(), probe_noise=0)
    setattr(current.probe, key, [x * factor for x in getattr(current.probe, key)])
    if not refused:
        assert cmp.compare(current, baseline).exit_code == 0
        assert cmp.compare(current, baseline, metric="cpu").exit_code == 0
        return
    name, unit = cmp.PROBE_NAMES[key]
    there = getattr(baseline.probe, key)[0]
    for metric in ("throughput", "cpu"):
        with pytest.raises(BaselineError) as err:
            cmp.compare(current, baseline, metric=metric)
        assert (f"{name} {there:.4g} {unit} there, {there * factor:.4g} here (x{factor:.2f}; beyond its noise on "
                f"one machine, x{cmp.PROBE_SPREAD[key]:.2f})" in str(err.value))
        assert str(err.value).startswith("the baseline is from another machine (or this one under heavy load): ")


def test_the_probe_noise_is_each_sides_own_scatter_where_it_is_larger():
    """A side whose CPU figure strays x1/0.3 = x3.33 between repeats (beyond the measured x2.7) cannot tell a
    median x0.32 from noise; x0.28 it can."""
    noisy = [1000.0, 300.0, 1000.0, 1000.0, 1000.0]
    assert cmp.probe_scatter(noisy) == pytest.approx(1 / 0.3)
    assert cmp.probe_scatter([1000.0]) == 1.0
    base = run(seed=1, env=on(), probe_noise=0)
    for scale, refused in ((0.32, False), (0.28, True)):
        current = run(seed=2, env=on(), probe_noise=0)
        current.probe.ideal_cpu_samples_per_s = [x * scale for x in noisy]
        if refused:
            with pytest.raises(BaselineError, match=r"x0\.28; beyond its noise on one machine, x3\.33\)"):
                cmp.check_machine(current.machine, current.probe, base)
        else:
            assert cmp.check_machine(current.machine, current.probe, base) == []
    current = run(seed=2, env=on(), probe_noise=0)
    current.probe.memcpy_gb_s = [20.0] * 5
    with pytest.raises(BaselineError, match="memory-copy probe 10 GB/s there, 20 here"):
        cmp.check_machine(current.machine, current.probe, base)


def test_a_machine_recorded_on_one_side_only_is_compared_with_one_warning():
    """The committed baseline predates cpu_affinity: compared on the CPU model and count, one warning."""
    c = cmp.compare(run(seed=2, env=on()), run(seed=1))
    assert c.exit_code == 0
    assert c.warnings == ["the cores allowed of the machine recorded on one side only (an older baseline): not "
                          "checked; regenerate it with --save-baseline to check them"]
    old = run(seed=1)
    old.machine, old.probe = {}, ProbeSeries()
    c = cmp.compare(run(seed=2, env=on()), old, metric="cpu")
    assert "the CPU model, CPU count, cores allowed, machine probe of the machine recorded on one side" in c.warnings[0]
    older = run(seed=1, env=on())  # a probe before its CPU figure: the memory copy checked, one warning
    older.probe.ideal_cpu_samples_per_s = []
    c = cmp.compare(run(seed=2, env=on()), older)
    assert c.warnings == ["the machine probe (ideal-loader probe in samples per CPU s) of the machine recorded on one "
                          "side only (an older baseline): not checked; regenerate it with --save-baseline to check "
                          "them"]


def test_same_machine_skips_the_machine_check():
    """The A/B gate's two sides, measured in one job on one machine: the probe is code under test there."""
    c = cmp.compare(run(machine=0.5, seed=2, env=on()), run(seed=1, env=on(cpu_model="x")), same_machine=True)
    assert c.exit_code == 0


def test_render_markdown_and_text():
    c = cmp.compare(run({CELLS[1]: 0.8, CELLS[2]: 1.2}, seed=2), run(seed=1))
    md = render_comparison(c, "markdown")
    first = md.splitlines()[0]
    assert first == ("**1 slower, 1 faster, 1 unchanged (metric: normalised throughput, min effect 5%, "
                     "alpha 0.05)**")
    assert "| cell" in md and "|---" in md.replace(" ", "") and "**slower**" in md
    assert all(cell in md for cell in CELLS) and re.search(r"\| -(19|20)\.\d% ", md)
    text = render_comparison(c)
    assert text.splitlines()[0].startswith("1 slower, 1 faster, 1 unchanged") and "|" not in text
    with pytest.raises(ValueError):
        render_comparison(c, "html")


def cpu_run(factor=1.0, cell_factor=None, seed=0, repeats=5, env=ENV):
    """A run whose cells cost loader + rank CPU per sample (the cpu gate metric), one cell scaled by factor."""
    rng = np.random.default_rng(seed)
    lines = []
    for rep in range(repeats):
        for c in CELLS:
            f = factor if c == cell_factor else 1.0
            cpu = 0.0004 * f * (1 + rng.normal(0, 0.01))
            lines.append(CellResult(c, repeat=rep, figures=Figures(throughput=100.0, step_p50_ms=10.0,
                                                                   loader_cpu_s_per_sample=cpu * 0.75,
                                                                   rank_cpu_s_per_sample=cpu * 0.25)))
    return Baseline.from_run(lines, env, ProbeSeries([1000.0] * repeats, [10.0] * repeats), COMPARABLE, "ci")


def test_the_cpu_metric_calls_more_cpu_per_sample_slower():
    c = cmp.compare(cpu_run(1.3, CELLS[1], seed=2), cpu_run(seed=1), metric="cpu")
    assert verdicts(c) == {CELLS[0]: "unchanged", CELLS[1]: "slower", CELLS[2]: "unchanged"}
    assert c.exit_code == 1 and c.rows[1].ratio == pytest.approx(1.3, rel=0.03)
    assert "loader + rank CPU s/sample" in c.summary_line() and "CPU s/sample" in render_comparison(c)
    cheaper = cmp.compare(cpu_run(0.7, CELLS[0], seed=2), cpu_run(seed=1), metric="cpu")
    assert verdicts(cheaper)[CELLS[0]] == "faster" and cheaper.exit_code == 0
    old = Baseline.from_json({k: v for k, v in cpu_run(seed=1).to_json().items()})
    for cell in old.cells.values():
        cell.cpu_s_per_sample = []
    assert any("no loader + rank CPU" in w for w in cmp.compare(cpu_run(seed=2), old, metric="cpu").warnings)
