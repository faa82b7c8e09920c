"""--check-predictions end to end on the smoke scenario, one case: real cells in spawned ranks, the side
measurements, predictions.jsonl and the table (harness.commands.check_predictions called directly)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.commands import check_predictions
from harness.errors import UsageError


@pytest.mark.slow
def test_the_check_predicts_and_measures_one_case(tmp_path, capsys):
    code = check_predictions.main(["--scenario", "smoke", "--data-dir", str(tmp_path / "data"), "--out",
                                   str(tmp_path / "out"), "--rounds", "1", "--steps", "10", "--quiet",
                                   "--case", "storage mmap"])
    assert code == 0
    run_dir = next((tmp_path / "out").iterdir())
    rows = [json.loads(line) for line in (run_dir / "predictions.jsonl").read_text().splitlines()]
    assert [r["config"] for r in rows] == ["calibration", "storage mmap"]
    assert rows[0]["error_pct"] == pytest.approx(0, abs=0.5)  # its visits fixed the run's CPU
    row = rows[1]
    assert row["predicted"] > 0 and row["measured"] > 0 and row["settings"]["storage"] == "mmap"
    assert row["error_pct"] == pytest.approx(100 * (row["predicted"] - row["measured"]) / row["measured"], abs=0.2)
    bench = json.loads((run_dir / "bench.json").read_text())
    assert bench["disk"]["read_mb_s"] > 0 and set(bench["read_s"]) == {"raw", "mmap", "hdf5"}
    out = capsys.readouterr().out
    assert "storage mmap" in out and "median |error|" in out
    assert check_predictions.main(["--analyse", str(run_dir)]) == 0  # the table again from the directory
    assert "storage mmap" in capsys.readouterr().out


def test_an_unknown_case_is_one_line(tmp_path):
    with pytest.raises(UsageError, match="no case named"):
        check_predictions.run("smoke", tmp_path / "data", tmp_path / "out", rounds=1, steps=10, quiet=True,
                              only=["workers 9 -> 10"])


def test_a_features_scenario_is_refused(tmp_path):
    smoke = (Path(__file__).resolve().parents[1] / "scenarios" / "smoke.toml").read_text()
    features = tmp_path / "features.toml"
    features.write_text(smoke.replace('workload = "pixels"', 'workload = "features"'))
    with pytest.raises(UsageError, match="pixels scenario"):
        check_predictions.run(str(features), tmp_path / "data", tmp_path / "out", quiet=True)
