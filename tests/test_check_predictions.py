"""--check-predictions end to end on the smoke scenario, one case: real cells in spawned ranks, the side
measurements, predictions.jsonl and the table (harness.checks.predictions.command's main called with a
Request, as harness.cli calls it)."""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from harness.checks.predictions import command as check_predictions
from harness.checks.predictions import table as predictiontable
from harness.checks.predictions.calibration import bench_of
from harness.checks.predictions.command import Request
from harness.errors import UsageError
from strategies import registry

ROOT = Path(__file__).resolve().parents[1]


def _rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "predictions.jsonl").read_text().splitlines()]


@pytest.mark.slow
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="the 1-CPU cases need a run allowed 2 CPUs")
def test_the_check_predicts_without_fitting_and_across_the_one_cpu_boundary(tmp_path, capsys):
    code = check_predictions.main(Request(scenario="smoke", data_dir=tmp_path / "data", out=tmp_path / "out",
                                          rounds=1, steps=10, quiet=True,
                                          cases=("storage mmap", "workers 1 -> 2", "calibration on 1 CPU")))
    assert code == 0
    run_dir = next((tmp_path / "out").iterdir())
    rows = _rows(run_dir)
    names = [r["config"] for r in rows]
    assert names[0] == "calibration" and {"storage mmap", "1 CPU (from 2)", "2 CPUs (from 1)",
                                          "workers 1 -> 2 on 2 CPUs (from 1)"} <= set(names)
    by = {r["config"]: r for r in rows}
    assert by["calibration"]["flag"] == "calibration" and not by["calibration"]["scored"]
    assert by["1 CPU (from 2)"]["settings"]["cpus"] == 1 and by["2 CPUs (from 1)"]["source"] == "calibration on 1 CPU"
    bench = json.loads((run_dir / "bench.json").read_text())
    assert bench["disk"]["read_mb_s"] > 0 and set(bench["read_s"]) == {"raw", "mmap", "hdf5"}
    out = capsys.readouterr().out
    assert "storage mmap" in out and "a predictor that answers the calibration's measured samples/s" in out
    # one round: no spread between visits measured, so no interval is stated (not one made up)
    assert all(r["interval"] is None and not r["inside"] for r in rows)

    # nothing is fitted to a measured samples/s: with the contention factor at 1 (the one place a measured
    # rate enters, the load the costs are undone at), the calibration measured twice as fast predicts the same
    bench["contention"]["factor"] = 1.0
    (run_dir / "bench.json").write_text(json.dumps(bench))
    assert check_predictions.main(Request(analyse=run_dir)) == 0
    before = _rows(run_dir)
    cells = run_dir / "runs" / "r0-0" / "cells.jsonl"  # the calibration's launch runs first
    lines = [json.loads(line) for line in cells.read_text().splitlines()]
    for line in lines:
        line["figures"]["throughput"] *= 2
    cells.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert check_predictions.main(Request(analyse=run_dir)) == 0
    after = _rows(run_dir)
    assert [r["predicted"] for r in after] == [r["predicted"] for r in before]
    assert after[0]["measured"] == pytest.approx(2 * before[0]["measured"], rel=0.01)


def test_an_unknown_case_is_one_line(tmp_path):
    with pytest.raises(UsageError, match="no case named"):
        check_predictions.main(Request(scenario="smoke", data_dir=tmp_path / "data", out=tmp_path / "out",
                                       rounds=1, steps=10, quiet=True, cases=("workers 9 -> 10",)))


def test_a_features_scenario_is_refused(tmp_path):
    smoke = (ROOT / "scenarios" / "smoke.toml").read_text()
    features = tmp_path / "features.toml"
    features.write_text(smoke.replace('workload = "pixels"', 'workload = "features"'))
    with pytest.raises(UsageError, match="pixels scenario"):
        check_predictions.main(Request(scenario=str(features), data_dir=tmp_path / "data", out=tmp_path / "out",
                                       quiet=True))
    with pytest.raises(UsageError, match="pixels scenario"):  # the same through the command line's override
        check_predictions.main(Request(scenario="smoke", data_dir=tmp_path / "data", out=tmp_path / "out",
                                       quiet=True, workload="features"))


@pytest.fixture
def isolated_registry(monkeypatch):
    """The registry as it is now, and no tests.plugins module imported: a plugin this test loads is gone
    afterwards (and is not already there from an earlier test)."""
    registry.load_builtins()
    monkeypatch.setattr(registry, "_REGISTRY", {a: dict(d) for a, d in registry._REGISTRY.items()})
    for module in [m for m in sys.modules if m.startswith("tests.plugins.")]:
        monkeypatch.delitem(sys.modules, module)
    yield
    for module in [m for m in sys.modules if m.startswith("tests.plugins.")]:
        del sys.modules[module]


def test_a_plugin_strategy_of_the_scenario_loads_through_the_request(tmp_path, isolated_registry):
    """The scenario names a plugin's storage: the request's plugins are imported before it loads (through
    `--scenario X --check-predictions --plugin M` they were ignored, and the scenario failed to load)."""
    smoke = (ROOT / "scenarios" / "smoke.toml").read_text()
    path = tmp_path / "planted.toml"
    path.write_text(smoke.replace('storage = ["raw", "mmap", "hdf5"]', 'storage = ["raw", "mmap_copy"]'))
    request = Request(scenario=str(path), data_dir=tmp_path / "data", out=tmp_path / "out", quiet=True,
                      cases=("no such case",))
    with pytest.raises(UsageError, match="mmap_copy"):  # without the plugin: an unknown storage
        check_predictions.main(request)
    with pytest.raises(UsageError, match="no case named no such case"):  # loaded, planned: past the scenario
        check_predictions.main(Request(**{**request.__dict__, "plugins": ("tests.plugins.planted",)}))
    assert not (tmp_path / "out").exists()  # refused before a run directory is made


def test_settings_the_check_cannot_honour_are_refused(tmp_path):
    for given, flag in (({"world_size": 4}, "--world-size"), ({"epochs": 1}, "--epochs")):
        with pytest.raises(UsageError, match=flag):
            check_predictions.main(Request(scenario="smoke", out=tmp_path / "out", **given))
    with pytest.raises(UsageError, match="--plugin no_such_module"):
        check_predictions.main(Request(scenario="smoke", plugins=("no_such_module",)))


def test_the_side_measurements_on_real_files(tmp_path):
    from harness.checks.predictions import sidebench
    from harness.data import pagecache

    files = []
    for i in range(20):
        f = tmp_path / f"{i:03d}.jpg"
        f.write_bytes(bytes(range(256)) * 40)
        files.append(f)
    small = sidebench.cold_files(files + [tmp_path / "skipped.npy"], pagecache.drop, most=10)
    assert small["files"] == 10 and small["bytes_per_file"] == 10240
    assert small["extra_wall_s_per_file"] >= 0 and small["extra_cpu_s_per_file"] >= 0
    with sidebench.OutsideRunnable(interval=0.01) as outside:
        sum(i * i for i in range(200_000))
    assert outside.mean is None or outside.mean >= 0


def test_a_packed_storages_cold_read_is_measured_with_its_own_reader(tmp_path):
    from harness.checks.predictions import sidebench
    from harness.data import pagecache

    path = tmp_path / "packed.bin"
    path.write_bytes(bytes(range(256)) * 4096)  # 1 MiB, 256 samples of 4 KiB

    class Reader:
        def __init__(self):
            self.f = open(path, "rb", buffering=0)

        def read_batch(self, indices):
            return [os.pread(self.f.fileno(), 4096, i * 4096) for i in indices]

        def close(self):
            self.f.close()

    opened = []
    read = sidebench.cold_read(lambda: opened.append(Reader()) or opened[-1], [path], pagecache.drop,
                               list(range(255, -1, -3)), batch=8)
    assert read["samples"] == 86 and read["extra_wall_s_per_sample"] >= 0 and read["extra_cpu_s_per_sample"] >= 0
    assert len(opened) == 1 and opened[0].f.closed  # opened after the drop, closed after

    class FirstTouchSlow(Reader):  # a device that makes each sample's first read wait 2 ms
        seen: set = set()

        def read_batch(self, indices):
            time.sleep(0.002 * len(set(indices) - self.seen))
            self.seen |= set(indices)
            return super().read_batch(indices)

    read = sidebench.cold_read(FirstTouchSlow, [path], lambda files: None, list(range(40)), batch=8)
    assert read["extra_wall_s_per_sample"] >= 0.0015  # the cold pass first, the warm pass after


def test_decode_costs_take_turns_so_a_spell_of_slow_work_does_not_fall_on_one_decoder():
    """Two decodes of one cost; the first twelve calls run in a slow spell (twice the work). Measured one
    after the other, the first decode took every one of its rounds in the spell; taking turns, each has a
    round outside it, so the two come out alike."""
    from harness.checks.predictions import sidebench

    calls = []

    def burn(seconds: float) -> None:
        start = time.thread_time()
        while time.thread_time() - start < seconds:
            pass

    def decode(_jpeg: bytes) -> None:
        calls.append(1)
        burn(0.002 if len(calls) <= 12 else 0.001)

    costs = sidebench.decode_costs({"a": decode, "b": decode}, [b""] * 4, rounds=3)
    assert 0.8 < costs["a"] / costs["b"] < 1.25, costs


def test_bench_json_reads_back_with_and_without_the_small_files():
    obj = {"read_s": {"raw": 1e-5}, "decode_s": {"160/pil": 4e-4}, "area": {"160": 100.0},
           "disk": {"read_mb_s": 1000.0, "latency_ms": 0.2, "cold_cpu_s_per_byte": 1e-10},
           "contention": {"factor": 1.1}}
    b = bench_of(obj)
    assert b.decode_s == {(160, "pil"): 4e-4} and b.area == {160: 100.0} and b.disk_latency_ms == 0.2
    assert b.cold_cpu_s_per_request == 0.0 and b.contention == 1.1
    obj["disk"]["small_files"] = {"bytes_per_file": 10_000, "extra_wall_s_per_file": 1e-4,
                                  "extra_cpu_s_per_file": 3e-5}
    b = bench_of(obj)  # 100 us extra, of which 10 kB at 1000 MB/s is 10 us: 90 us latency
    assert b.disk_latency_ms == pytest.approx(0.09) and b.cold_cpu_s_per_request == 3e-5
    assert b.cold_requests == {} and b.cold_cpu_s == {}
    obj["disk"]["cold_reads"] = {"mmap": {"samples": 2048, "extra_wall_s_per_sample": 9e-6,
                                          "extra_cpu_s_per_sample": 2e-6}}
    b = bench_of(obj)  # 9 us a cold sample over a 90 us request: a tenth of a request (readahead)
    assert b.cold_requests == {"mmap": pytest.approx(0.1)} and b.cold_cpu_s == {"mmap": 2e-6}


def _row(config: str, predicted: float, shared: float, measured: float, outside: float, flag: str = "") -> dict:
    err = lambda p: round(100 * (p / measured - 1), 1)  # noqa: E731
    return {"config": config, "source": "calibration", "predicted": predicted, "predicted_shared": shared,
            "measured": measured, "error_pct": err(predicted), "error_shared_pct": err(shared),
            "null_error_pct": 0.0, "flag": flag, "scored": not flag, "binds": "loader CPU", "spread_pct": 1.0,
            "outside_pct": outside, "visits": [{"other_cpu_pct": outside}],
            "loader_ms": {"predicted": 0.3, "measured": 0.3}, "rank_ms": {"predicted": 0.1, "measured": 0.1}}


def test_the_headline_is_the_model_on_the_cpus_the_visits_had_and_the_table_names_the_load():
    """Beside a hog (about one core of two busy), the model on the CPUs the visits had is the headline; the
    absolute model, which leaves the load in, is beside it; the summary names the load the cases saw."""
    rows = [_row("calibration", 2000, 1600, 1700, 46.0, "calibration"), _row("storage mmap", 2100, 1730, 1660, 42.0),
            _row("ranks 1 -> 2", 2960, 1990, 1790, 33.0)]
    text = predictiontable.table(rows)
    lines = text.splitlines()
    assert lines[0].split()[1:9] == ["predicted", "measured", "error", "%", "90%", "interval", "in", "absolute"]
    mmap = next(line for line in lines if line.startswith("storage mmap"))
    assert mmap.split()[2:5] == ["1730.0", "1660.0", "+4.2"] and "+26.5" in mmap and " 42.0 " in mmap
    headline = next(line for line in lines if line.startswith(predictiontable.HEADLINE))
    assert "median |error| 7.7%, max 11.2%, 2 of 2 within 15%" in headline
    assert "max 65.4%, 0 of 2 within 15%" in next(line for line in lines if line.startswith(predictiontable.ABSOLUTE))
    assert "median 37.5%, max 42.0% (a loaded host" in text
    rows[1]["note"] = predictiontable.note(rows[1], 1.0)
    assert rows[1]["note"] == ""  # within 15% on this host: no note, though the absolute model is 26.5% off
    quiet = predictiontable.table([_row("storage mmap", 2100, 2100, 2050, 0.5)])
    assert "(a quiet host: the two models agree)" in quiet


def test_the_table_says_what_the_noise_alone_would_make_of_a_model_without_error():
    """Beside the headline's median |error|, the median a perfect model would show from the visits' noise
    (0.674 x the cases' noise sd, their median); no line where no row has an interval."""
    rows = [_row("storage mmap", 2100, 2100, 2000, 0.5), _row("storage hdf5", 2100, 2100, 1900, 0.5)]
    assert "noise alone" not in predictiontable.table(rows)
    rows[0]["noise_pct"], rows[1]["noise_pct"] = 8.0, 12.0
    line = next(x for x in predictiontable.table(rows).splitlines() if "noise alone" in x)
    assert "a median |error| of about 6.7% for a model without error" in line  # 0.674 x 10
    assert "the headline's is 7.8%" in line  # +5.0% and +10.5%
