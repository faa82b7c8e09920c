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
    # its visits fix the run's CPU (checkcases.run_cores): exact, unless even the host's every core predicts
    # less (a bound the cores do not move binds, e.g. the rank's own host work): then below, never above
    assert rows[0]["error_pct"] <= 0.5 and rows[0]["run_cores"] > 0
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


def test_the_side_measurements_on_real_files(tmp_path):
    from harness.commands import checkbench

    files = []
    for i in range(20):
        f = tmp_path / f"{i:03d}.jpg"
        f.write_bytes(bytes(range(256)) * 40)
        files.append(f)
    small = checkbench.cold_files(files + [tmp_path / "skipped.npy"], most=10)
    assert small["files"] == 10 and small["bytes_per_file"] == 10240
    assert small["extra_wall_s_per_file"] >= 0 and small["extra_cpu_s_per_file"] >= 0
    with checkbench.OutsideRunnable(interval=0.01) as outside:
        sum(i * i for i in range(200_000))
    assert outside.mean is None or outside.mean >= 0


def test_bench_json_reads_back_with_and_without_the_small_files():
    obj = {"read_s": {"raw": 1e-5}, "decode_s": {"160/pil": 4e-4}, "area": {"160": 100.0},
           "disk": {"read_mb_s": 1000.0, "latency_ms": 0.2, "cold_cpu_s_per_byte": 1e-10},
           "contention": {"factor": 1.1}}
    b = check_predictions.bench_of(obj)
    assert b.decode_s == {(160, "pil"): 4e-4} and b.area == {160: 100.0} and b.disk_latency_ms == 0.2
    assert b.cold_cpu_s_per_request == 0.0 and b.contention == 1.1
    obj["disk"]["small_files"] = {"bytes_per_file": 10_000, "extra_wall_s_per_file": 1e-4,
                                  "extra_cpu_s_per_file": 3e-5}
    b = check_predictions.bench_of(obj)  # 100 us extra, of which 10 kB at 1000 MB/s is 10 us: 90 us latency
    assert b.disk_latency_ms == pytest.approx(0.09) and b.cold_cpu_s_per_request == 3e-5
