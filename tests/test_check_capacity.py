"""check-capacity: the capacity among 1, 2 and 4 ranks predicted by the absolute model against the measured
one, a disagreement an exit 1, and a setting where neither can differ said to be one (pure parts); end to end
on the smoke scenario with a slow accelerator (real cells in spawned ranks)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.checks.predictions import capacity as check_capacity
from harness.checks.predictions import capacity_command
from harness.errors import EXIT_OK, EXIT_REGRESSION

ROOT = Path(__file__).resolve().parents[1]


def rows(predicted: list[float], measured: list[float], outside: list[float] = (0.0, 0.0, 0.0)) -> list[dict]:
    return [{"workload": "pixels", "world_size": ws, "predicted_au_pct": p, "measured_au_pct": m,
             "other_cpu_pct": o} for ws, p, m, o in zip(check_capacity.SIZES, predicted, measured, outside)]


def test_the_capacity_is_the_largest_size_fed_with_every_smaller_one():
    assert check_capacity.fed(rows([99, 95, 60], [0, 0, 0]), "predicted_au_pct") == 2
    assert check_capacity.fed(rows([80, 95, 99], [0, 0, 0]), "predicted_au_pct") == 0  # 1 rank already misses
    assert check_capacity.fed(rows([99, 99, 99], [0, 0, 0]), "predicted_au_pct") == 4


def calibrated(predicted, measured, repeats=(0.0, 1.4)):
    """Rows whose sizes 1 and 2 ran twice: each size's calibration measured `repeats` points off its repeat."""
    out = rows(predicted, measured)
    for row, d in zip(out[:2], repeats):
        row["calibration_au_pct"] = row["measured_au_pct"] + d
    return out


def test_predicted_and_measured_capacity_can_disagree_and_then_the_check_fails():
    line, state = check_capacity.verdict(rows([99, 95, 60], [99, 85, 50]))
    assert state == check_capacity.DISAGREE and "predicted 2, measured 1: DISAGREE" in line
    line, state = check_capacity.verdict(calibrated([99, 95, 60], [97, 96, 58], repeats=(1.5, 2.0)))
    assert state == check_capacity.AGREE and "predicted 2, measured 2: agree" in line and "cannot tell" not in line


def test_a_disagreement_under_outside_load_is_inconclusive_with_its_own_exit_code():
    """A loaded machine is not a wrong model: exit 4 and the load named; a quiet disagreement stays exit 1."""
    line, state = check_capacity.verdict(rows([99, 95, 60], [99, 85, 50], outside=[2.0, 35.0, 40.0]))
    assert state == check_capacity.INCONCLUSIVE and "inconclusive: outside load 40% in 2 of 3 launches" in line
    assert "DISAGREE" in line  # the miss is still named
    assert check_capacity.exit_code([state, check_capacity.AGREE]) == 4
    assert check_capacity.exit_code([state, check_capacity.DISAGREE]) == EXIT_REGRESSION  # one quiet miss
    assert check_capacity.exit_code([check_capacity.AGREE, check_capacity.AGREE]) == EXIT_OK
    assert check_capacity.exit_code([check_capacity.UNDECIDED, check_capacity.AGREE]) == 4


def test_a_host_that_feeds_every_size_or_none_cannot_tell_and_says_so():
    for au in (99, 40):
        line, state = check_capacity.verdict(rows([au] * 3, [au] * 3))
        assert state == check_capacity.AGREE and "cannot tell" in line and "scenarios/capacity.toml" in line


@pytest.mark.slow
def test_the_check_runs_every_size_and_exits_on_its_verdict(tmp_path, capsys):
    smoke = (ROOT / "scenarios" / "smoke.toml").read_text()
    path = tmp_path / "slow.toml"
    path.write_text(smoke.replace('accelerator = "V100-16GB"', 'accelerator = "SLOW"')
                    + '\n[accelerators.SLOW]\nmemory_gb = 16.0\nresnet50_img_per_s = 30.0\nfp16_tflops = 0.05\n')
    code = capacity_command.main(capacity_command.Request(scenario=str(path), data_dir=tmp_path / "data",
                                                          out=tmp_path / "out", steps=10))
    out = capsys.readouterr().out
    run_dir = next((tmp_path / "out").iterdir())
    got = [json.loads(line) for line in (run_dir / "capacity.jsonl").read_text().splitlines()]
    assert [(r["workload"], r["world_size"]) for r in got] == [(w, n) for w in ("pixels", "features")
                                                              for n in check_capacity.SIZES]
    states = [check_capacity.verdict([r for r in got if r["workload"] == w])[1] for w in ("pixels", "features")]
    assert code == check_capacity.exit_code(states)
    assert "SLOW on" in out and "kept at AU >= 90% among 1, 2, 4 ranks" in out


def test_an_au_within_the_repeats_noise_of_the_line_is_undecided_never_agreement():
    """The calibrations' repeats differed by 1.4 points: 89.0 predicted against 90.4 measured at 2 ranks is
    at the line on both sides: undecided (exit 4), not agreement."""
    at_line = calibrated([97.8, 89.0, 82.5], [97.7, 90.4, 81.6], repeats=(0.0, -1.4))
    assert check_capacity.noise(at_line) == pytest.approx(0.7)
    line, state = check_capacity.verdict(at_line)
    assert state == check_capacity.UNDECIDED and "predicted undecided, measured undecided: undecided" in line
    assert check_capacity.exit_code([state]) == 4


@pytest.mark.parametrize("predicted, measured, repeats", [
    # the old band's pass recorded in the measurements: 4-rank AU 90.7 predicted, 82.6 measured (4 vs 2)
    ([98.6, 92.4, 90.7], [98.3, 93.4, 82.6], (0.3, 1.0)),
    # a 4-rank AU of 91 predicted against 20 measured, repeats' noise sd 2.5
    ([99.0, 95.0, 91.0], [98.0, 95.5, 20.0], (2.5 * 2 ** 0.5, 2.5 * 2 ** 0.5)),
    # the first case with one calibration repeat off by 12 points: the noise is cut at its limit
    ([98.6, 92.4, 90.7], [98.3, 93.4, 82.6], (12.0, 1.0)),
])
def test_prediction_and_measurement_that_differ_at_a_size_fail(predicted, measured, repeats):
    line, state = check_capacity.verdict(calibrated(predicted, measured, repeats))
    assert state == check_capacity.DISAGREE and "DISAGREE; at 4 rank(s) AU" in line
    assert check_capacity.exit_code([state, check_capacity.AGREE]) == EXIT_REGRESSION


def test_an_outlying_repeat_cannot_make_the_check_pass():
    """Every size agrees within the limit's band, but a repeat 12 points off: inconclusive, not agree."""
    line, state = check_capacity.verdict(calibrated([99.0, 95.0, 60.0], [98.5, 95.5, 61.0], repeats=(12.0, 1.0)))
    assert state == check_capacity.INCONCLUSIVE and "differed by more than the check accepts" in line
    assert check_capacity.noise(calibrated([99.0, 95.0, 60.0], [98.5, 95.5, 61.0], repeats=(12.0, 1.0))) == \
        check_capacity.NOISE_LIMIT


def test_a_difference_under_two_points_is_never_a_disagreement():
    """Two pairs of repeats gave a noise sd of 0.1 points (2026-12-06): the model's 0.6-point miss of its own
    1-rank calibration was then a DISAGREE. Under MIN_POINTS it is not; at 3 points it still is."""
    near = calibrated([94.6, 79.4, 52.5], [94.0, 79.3, 52.5], repeats=(0.1, -0.2))
    assert check_capacity.noise(near) < 0.2 and check_capacity.misses(near, check_capacity.noise(near)) == []
    line, state = check_capacity.verdict(near)
    assert state == check_capacity.AGREE and "within 2.0 points (noise sd 0.1; at least 2)" in line
    off = calibrated([94.6, 79.4, 55.5], [94.0, 79.3, 52.5], repeats=(0.1, -0.2))
    line, state = check_capacity.verdict(off)
    assert state == check_capacity.DISAGREE and "at 4 rank(s) AU 55.5 predicted, 52.5 measured" in line
    assert "at 1 rank(s)" not in line
