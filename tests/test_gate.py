"""The CI gate and the offline commands through the CLI (harness.cli.main in this process; the tests marked
slow run run_bench.py as a process): exit codes on planted changes and on incomplete run directories, the
report rebuilt from cells.jsonl alone."""
from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest
from conftest import REPO, run_bench

from harness import cli

FIXTURE = REPO / "tests" / "fixtures" / "cells_4xV100.jsonl"
CELLS = [json.loads(line) for line in FIXTURE.read_text().splitlines()][:4]
COMPARABLE = {"dataset_key": "k", "world_size": 4, "workload": "pixels", "batch_size": 32,
              "accelerator": "V100-16GB", "emulated": True}


def make_run(path: Path, factors: dict[str, float] | None = None, repeats: int = 5, world_size: int = 4,
             probe: float = 1000.0, cpu_model: str = "test", hostname: str = "vm") -> Path:
    """A run directory like the harness writes, with throughput scaled per cell by `factors`."""
    path.mkdir(parents=True)
    lines = []
    for repeat in range(repeats):
        for cell in CELLS:
            line = copy.deepcopy(cell)
            noise = 1 + 0.01 * ((repeat * 7 + len(lines)) % 5 - 2)  # +-2%, deterministic
            line["figures"]["throughput"] *= noise * (factors or {}).get(cell["cell"], 1.0)
            line["repeat"] = repeat
            lines.append(line)
    (path / "cells.jsonl").write_text("".join(json.dumps(c) + "\n" for c in lines))
    (path / "probe.jsonl").write_text("".join(json.dumps({"repeat": r, "ideal_samples_per_s": probe,
                                                          "ideal_cpu_samples_per_s": probe, "memcpy_gb_s": 5.0})
                                              + "\n" for r in range(repeats)))
    env = {"scenario": "4xV100", "comparable": dict(COMPARABLE, world_size=world_size),
           "versions": {"torch": "2.13.0"}, "cpu_count": 2, "cpu_model": cpu_model, "memory_gb": 24,
           "cpu_affinity": 2, "hostname": hostname,
           "device": {"mode": "emulated", "accelerator": "V100-16GB", "world_size": world_size},
           "dataset": {"samples": 2000}}
    (path / "env.json").write_text(json.dumps(env))
    return path


def main(capsys, *args: str) -> tuple[int, str, str]:
    """run_bench.py ARGS in this process: (exit code, stdout, stderr)."""
    code = cli.main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_identical_runs_pass(tmp_path, capsys):
    a, b = make_run(tmp_path / "a"), make_run(tmp_path / "b")
    code, out, err = main(capsys, "compare", a, b)
    assert code == 0, out + err
    assert "0 slower, 0 faster, 4 unchanged" in out


def test_planted_regression_fails_with_exit_1(tmp_path, capsys):
    slow = CELLS[1]["cell"]
    a, b = make_run(tmp_path / "a"), make_run(tmp_path / "b", {slow: 0.8})
    code, out, err = main(capsys, "compare", a, b, "--markdown")
    assert code == 1, out + err
    assert "1 slower" in out and "| " in out  # a markdown table for the PR comment
    row = next(line for line in out.splitlines() if slow.split(",")[1] in line and "slower" in line)
    assert "-20" in row


@pytest.mark.parametrize("flags", [(), ("--raw",), ("--gate-metric", "cpu"), ("--gate-metric", "figures")])
def test_a_run_from_another_machine_is_not_comparable_for_every_metric(tmp_path, capsys, flags):
    """Another CPU model (the issue: an AMD EPYC run against an Intel Xeon baseline), or the same one three
    times as fast in the probe (beyond its measured x2.7) and in every cell: exit 3 in one line naming what
    differs, for every metric (normalised throughput carried across machines before; raw only warned)."""
    a = make_run(tmp_path / "a", cpu_model="Intel(R) Xeon(R) Processor")
    b = make_run(tmp_path / "b", cpu_model="AMD EPYC")
    code, out, err = main(capsys, "compare", a, b, *flags)
    assert code == 3 and out == "" and len(err.strip().splitlines()) == 1, out + err
    assert "CPU model Intel(R) Xeon(R) Processor there, AMD EPYC here" in err and "scripts/ci_gate.sh" in err
    fast = make_run(tmp_path / "fast", {c["cell"]: 3.0 for c in CELLS}, probe=3000.0, cpu_model="Intel(R) Xeon(R) "
                    "Processor")
    code, out, err = main(capsys, "compare", a, fast, *flags)
    assert code == 3 and len(err.strip().splitlines()) == 1
    assert "ideal-loader probe 1000 samples per CPU s there, 3000 here (x3.00; beyond its noise on one machine, " \
           "x2.70)" in err


def test_a_fresh_hostname_alone_is_the_same_machine(tmp_path, capsys):
    a, b = make_run(tmp_path / "a"), make_run(tmp_path / "b", hostname="ci-runner-7f3a")
    code, out, err = main(capsys, "compare", a, b)
    assert code == 0 and "4 unchanged" in out and "WARNING" not in err, out + err


def test_not_comparable_exits_3(tmp_path, capsys):
    a, b = make_run(tmp_path / "a"), make_run(tmp_path / "b", world_size=2)
    code, out, err = main(capsys, "compare", a, b)
    assert code == 3 and "world_size=4, this run has 2" in err
    assert len(err.strip().splitlines()) == 1 and out == ""


@pytest.mark.parametrize("side", ["a", "b"])
@pytest.mark.parametrize("lacks", ["env.json", "probe.jsonl", "cells.jsonl", "everything"])
def test_compare_with_an_incomplete_run_dir_exits_3_in_one_line(tmp_path, capsys, side, lacks):
    runs = {"a": make_run(tmp_path / "a"), "b": make_run(tmp_path / "b")}
    if lacks == "everything":
        shutil.rmtree(runs[side])
    else:
        (runs[side] / lacks).unlink()
    code, out, err = main(capsys, "compare", runs["a"], runs["b"])
    assert code == 3, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err and out == ""
    assert str(runs[side]) in err and (lacks in err or "not a directory" in err)


@pytest.mark.parametrize("damage", ["bad json", "old env", "no probe for a repeat"])
def test_compare_with_an_unreadable_run_dir_exits_3_in_one_line(tmp_path, capsys, damage):
    a, b = make_run(tmp_path / "a"), make_run(tmp_path / "b")
    if damage == "bad json":  # in the middle: a cut-off last line is skipped with a warning instead
        lines = (b / "cells.jsonl").read_text().splitlines(keepends=True)
        (b / "cells.jsonl").write_text("".join(lines[:1] + ["{not json\n"] + lines[1:]))
    elif damage == "old env":
        (b / "env.json").write_text(json.dumps({"versions": {}}))
    else:
        (b / "probe.jsonl").write_text(json.dumps({"repeat": 0, "ideal_samples_per_s": 1000.0,
                                                   "memcpy_gb_s": 5.0}) + "\n")
    code, out, err = main(capsys, "compare", a, b)
    assert code == 3 and len(err.strip().splitlines()) == 1 and "run B" in err, err


@pytest.mark.slow  # runs run_bench.py as a process
def test_the_process_exits_3_on_an_incomplete_run_and_a_missing_baseline(tmp_path):
    a, b = make_run(tmp_path / "a"), make_run(tmp_path / "b")
    (b / "env.json").unlink()
    proc = run_bench("compare", str(a), str(b))
    assert proc.returncode == 3, proc.stderr
    assert proc.stderr.strip().splitlines() == [f"run_bench.py: error: run B {b} is incomplete (no env.json); "
                                                f"pass a finished run directory under results/"]
    proc = run_bench("--scenario", "smoke", "--baseline", str(tmp_path / "nope.json"))
    assert proc.returncode == 3 and "nope.json" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_report_rebuilds_everything_from_cells_jsonl(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(FIXTURE, run / "cells.jsonl")
    code, out, err = main(capsys, "report", run)
    assert code == 0, err
    assert "Where each rank's time goes" in out and "cumulative ladder" in out.lower()
    assert out.count("ACCELERATOR EMULATED") == 1 and out.count("VERDICT: host work outlasted") == 1
    report = (run / "report.md").read_text()
    assert "## Throughput\n" in report and "## The articles' tables, measured" in report
    assert report.count("ACCELERATOR EMULATED") == 1
    assert len((run / "summary.csv").read_text().splitlines()) == 25
    for png in ("throughput.png", "step_times.png", "time_split.png"):
        assert (run / "plots" / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_one_repeat_each_is_inconclusive_exit_0_with_one_warning(tmp_path, capsys):
    """The same code twice with 1 repeat (even 20% apart): the data cannot support a test; no cry of wolf."""
    slow = CELLS[1]["cell"]
    a, b = make_run(tmp_path / "a", repeats=1), make_run(tmp_path / "b", {slow: 0.8}, repeats=1)
    code, out, err = main(capsys, "compare", a, b)
    assert code == 0, out + err
    assert "0 slower, 0 faster, 0 unchanged, 4 inconclusive" in out
    warnings = [line for line in err.splitlines() if line.startswith("WARNING")]
    assert len(warnings) == 1 and "4 cell(s) inconclusive: 1 vs 1 repeats" in warnings[0]
    code, out, err = main(capsys, "compare", a, b, "--strict")
    assert code == 1 and "fails under --strict" in err


def test_three_repeats_a_side_are_inconclusive_and_strict_fails(tmp_path, capsys):
    a, b = make_run(tmp_path / "a", repeats=3), make_run(tmp_path / "b", repeats=3)
    assert main(capsys, "compare", a, b)[0] == 0
    code, out, err = main(capsys, "compare", a, b, "--strict", "--markdown")
    assert code == 1 and "4 inconclusive" in out


def test_report_what_if_cores(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    lines = [json.loads(line) for line in FIXTURE.read_text().splitlines()][:2]
    lines[0]["figures"].update(loader_cpu_s_per_sample=0.004, device_samples_per_s=400.0, cores_to_feed=1.6)
    (run / "cells.jsonl").write_text("".join(json.dumps(c) + "\n" for c in lines))
    code, out, err = main(capsys, "report", run, "--what-if-cores", "1.5")
    assert code == 0, err
    assert "predicted samples/s at 1.5 cores/rank* (modelled)" in out
    # 4 ranks x min(400, 1.5 / 0.004 = 375) = 1500; the second cell lacks the figures: "-"
    row = next(line for line in out.splitlines() if line.startswith("default ") and "1.60" in line)
    assert row.split()[-1] == "1500"
    code, out, err = main(capsys, "report", run, "--what-if-cores", "0")
    assert code == 2 and "--what-if-cores = 0 must be a positive number" in err
