"""check-capacity: the capacity among 1, 2 and 4 ranks predicted by the absolute model against the measured
one, a disagreement an exit 1, and a setting where neither can differ said to be one (pure parts); end to end
on the smoke scenario with a slow accelerator (real cells in spawned ranks)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.commands import check_capacity
from harness.errors import EXIT_OK, EXIT_REGRESSION

ROOT = Path(__file__).resolve().parents[1]


def rows(predicted: list[float], measured: list[float], outside: list[float] = (0.0, 0.0, 0.0)) -> list[dict]:
    return [{"workload": "pixels", "world_size": ws, "predicted_au_pct": p, "measured_au_pct": m,
             "other_cpu_pct": o} for ws, p, m, o in zip(check_capacity.SIZES, predicted, measured, outside)]


def test_the_capacity_is_the_largest_size_fed_with_every_smaller_one():
    assert check_capacity.fed(rows([99, 95, 60], [0, 0, 0]), "predicted_au_pct") == 2
    assert check_capacity.fed(rows([80, 95, 99], [0, 0, 0]), "predicted_au_pct") == 0  # 1 rank already misses
    assert check_capacity.fed(rows([99, 99, 99], [0, 0, 0]), "predicted_au_pct") == 4


def test_predicted_and_measured_capacity_can_disagree_and_then_the_check_fails():
    line, differs = check_capacity.verdict(rows([99, 95, 60], [99, 85, 50]))
    assert differs and "predicted 2, measured 1: DISAGREE" in line
    line, differs = check_capacity.verdict(rows([99, 95, 60], [97, 92, 55]))
    assert not differs and "predicted 2, measured 2: agree" in line and "cannot tell" not in line


def test_a_disagreement_under_outside_load_is_inconclusive_with_its_own_exit_code():
    """A loaded machine is not a wrong model: exit 4 and the load named; a quiet disagreement stays exit 1."""
    line, differs = check_capacity.verdict(rows([99, 95, 60], [99, 85, 50], outside=[2.0, 35.0, 40.0]))
    assert differs and "inconclusive: outside load 40% in 2 of 3 launches" in line and "DISAGREE" not in line
    loaded = check_capacity.inconclusive(rows([99, 95, 60], [99, 85, 50], outside=[2.0, 35.0, 40.0]))
    assert check_capacity.exit_code([(True, loaded), (False, False)]) == 4
    assert check_capacity.exit_code([(True, loaded), (True, False)]) == EXIT_REGRESSION  # one quiet miss
    assert check_capacity.exit_code([(False, True), (False, False)]) == EXIT_OK


def test_a_host_that_feeds_every_size_or_none_cannot_tell_and_says_so():
    for au in (99, 40):
        line, differs = check_capacity.verdict(rows([au] * 3, [au] * 3))
        assert not differs and "cannot tell" in line and "scenarios/capacity.toml" in line


@pytest.mark.slow
def test_the_check_runs_every_size_and_exits_on_its_verdict(tmp_path, capsys):
    smoke = (ROOT / "scenarios" / "smoke.toml").read_text()
    path = tmp_path / "slow.toml"
    path.write_text(smoke.replace('accelerator = "V100-16GB"', 'accelerator = "SLOW"')
                    + '\n[accelerators.SLOW]\nmemory_gb = 16.0\nresnet50_img_per_s = 30.0\nfp16_tflops = 0.05\n')
    code = check_capacity.main(check_capacity.Request(scenario=str(path), data_dir=tmp_path / "data",
                                                      out=tmp_path / "out", steps=10))
    out = capsys.readouterr().out
    run_dir = next((tmp_path / "out").iterdir())
    got = [json.loads(line) for line in (run_dir / "capacity.jsonl").read_text().splitlines()]
    assert [(r["workload"], r["world_size"]) for r in got] == [(w, n) for w in ("pixels", "features")
                                                              for n in check_capacity.SIZES]
    disagree = any(check_capacity.verdict([r for r in got if r["workload"] == w])[1] for w in ("pixels", "features"))
    assert code == (EXIT_REGRESSION if disagree else EXIT_OK)
    assert "SLOW on" in out and "kept at AU >= 90% among 1, 2, 4 ranks" in out


def test_an_au_within_the_repeats_noise_of_the_line_decides_nothing():
    """The calibrations' repeats differed by 1.4 points: 89.0 predicted against 90.4 measured at 2 ranks is
    at the line, not a disagreement; 8 points off at 4 ranks, across the line, still is."""
    at_line = rows([97.8, 89.0, 87.5], [97.7, 90.4, 79.6])
    at_line[1]["calibration_au_pct"] = 89.0  # the 2-rank calibration's AU; its repeat measured 90.4
    line, differs = check_capacity.verdict(at_line)
    assert check_capacity.noise(at_line) == pytest.approx(1.4)
    assert not differs and "predicted 1, measured 2: agree within the noise" in line
    across = rows([98.6, 92.4, 95.7], [98.3, 91.5, 82.6])
    across[1]["calibration_au_pct"] = 93.4
    line, differs = check_capacity.verdict(across)
    assert differs and "predicted 4, measured 2: DISAGREE" in line
    assert check_capacity.verdict(rows([97.8, 89.0, 87.5], [97.7, 90.4, 79.6]))[1]  # no noise measured: exact
