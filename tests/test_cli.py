"""The command line: --list, bad input as one line on stderr with exit code 2 and no traceback, a bug as one
line with exit code 2 (never 1, which means a regression), --debug for the traceback.

Tests that run run_bench.py as a process are marked slow; the others call harness.cli.main in this process.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import run_bench

from harness import cli
from harness.cli import fromargs, parsers
from harness.commands import bench
from harness.report import report
from harness.run import launch

FIXTURE = Path(__file__).parent / "fixtures" / "cells_1xV100.jsonl"


def main(capsys, *args) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("make", ["missing", "empty dir", "empty file", "bad line"])
def test_report_on_a_missing_or_empty_run_dir_is_one_line_exit_2(tmp_path, capsys, make):
    run = tmp_path / "run"
    if make != "missing":
        run.mkdir()
    if make == "empty file":
        (run / "cells.jsonl").write_text("\n")
    if make == "bad line":
        (run / "cells.jsonl").write_text('{"cell": "a"}\n[1, 2]\n')
    code, out, err = main(capsys, "report", run)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and err.startswith("run_bench.py: error: ") and str(run) in err


def test_an_unexpected_exception_is_a_bug_in_one_line_exit_2(tmp_path, capsys, monkeypatch):
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(FIXTURE, run / "cells.jsonl")

    def broken(*args, **kwargs):
        raise KeyError("throughput")

    monkeypatch.setattr(report, "write_all", broken)
    code, out, err = main(capsys, "report", run)
    assert code == 2 and out == ""
    (line,) = err.strip().splitlines()
    assert "internal error (a bug in the harness): KeyError: 'throughput'" in line and "--debug" in line
    assert "test_cli.py:" in line  # where it was raised
    code, out, err = main(capsys, "report", run, "--debug")
    assert code == 2 and "Traceback (most recent call last)" in err and "in broken" in err


def test_debug_shows_the_traceback_of_a_usage_error_and_keeps_the_exit_code(tmp_path, capsys):
    code, _, err = main(capsys, "report", tmp_path / "nope", "--debug")
    assert code == 2 and "Traceback" in err and "UsageError: " in err and "is not a directory" in err
    code, _, err = main(capsys, "compare", tmp_path / "a", tmp_path / "b", "--debug")
    assert code == 3 and "BaselineError: run A (the baseline)" in err


@pytest.mark.slow  # runs run_bench.py as a process
def test_debug_in_a_process(tmp_path):
    proc = run_bench("report", str(tmp_path / "nope"), "--debug")
    assert proc.returncode == 2 and "Traceback" in proc.stderr and "UsageError" in proc.stderr


@pytest.mark.slow  # runs run_bench.py as a process
def test_list_prints_each_scenario_with_description():
    proc = run_bench("--list")
    assert proc.returncode == 0
    lines = dict(line.split(None, 1) for line in proc.stdout.splitlines())
    assert "4xV100" in lines and "smoke" in lines and "V100" in lines["4xV100"]


@pytest.mark.slow  # runs run_bench.py as a process
@pytest.mark.parametrize("args, message", [
    (["--scenario", "nope"], "unknown scenario 'nope'; available: 1xH200, 1xV100, 4xV100"),
    (["--scenario", "smoke", "--batch-size", "0"], "--batch-size = 0 must be a positive integer"),
    (["--scenario", "smoke", "--world-size", "-1"], "--world-size = -1 must be a positive integer"),
    (["--scenario", "smoke", "--device", "cuda"], "--device cuda needs 2 GPUs"),
    (["--scenario", "smoke", "--out", "/proc/no/such"], "--out /proc/no/such: /proc is not writable"),
    (["--scenario", "smoke", "--batch-size", "x"], "invalid int value: 'x'"),
    (["--scenario", "smoke", "--plugin", "no_such_module"], "--plugin no_such_module: module 'no_such_module' "
                                                            "not found"),
    ([], "give --scenario NAME"),
])
def test_bad_input_is_one_line_exit_2(args, message):
    proc = run_bench(*args)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.slow  # runs run_bench.py as a process
def test_unwritable_data_dir_is_usage_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    proc = run_bench("--scenario", "smoke", "--data-dir", str(blocker / "sub"), "--out", str(tmp_path / "r"))
    assert proc.returncode == 2
    assert "data directory" in proc.stderr and "--data-dir" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_comparable_names_every_setting_and_the_real_device():
    from harness.config import scenario

    sc = scenario.load("ci", {k: None for k in scenario.OVERRIDES})
    comp = bench.comparable_of(sc, "emulated", "cold")
    t = sc.training
    assert comp == {"dataset_key": sc.dataset.key(), "world_size": sc.world_size, "workload": t.workload,
                    "batch_size": t.batch_size, "accelerator": sc.accelerator.name, "emulated": True,
                    "device": f"{sc.accelerator.name} (emulated)", "image_size": t.image_size,
                    "steps": t.steps, "epochs": t.epochs, "warmup_steps": t.warmup_steps, "workers": t.workers,
                    "prefetch_factor": t.prefetch_factor, "cache_state": "cold", "decoder": t.decoder}
    on_gpu = bench.comparable_of(sc, "cuda", name="NVIDIA H200")
    assert on_gpu["device"] == "NVIDIA H200" and on_gpu["emulated"] is False
    assert set(on_gpu["gpu"]) == {"gpu_count", "gpu_names", "gpu_memory_bytes", "driver", "cuda_runtime"}


def test_strict_and_what_if_options_parse():
    args = cli.build_parser().parse_args(["--scenario", "ci", "--strict", "--what-if-cores", "2.5"])
    assert args.strict and args.what_if_cores == 2.5
    assert cli.build_parser().parse_args(["--scenario", "ci"]).what_if_cores is None


def test_share_gpu_without_a_gpu_is_one_line_with_device_cuda_and_a_note_otherwise(tmp_path, capsys):
    """--share-gpu reaches the launch from the command line: with --device cuda and no GPU, one line and exit 2
    before anything runs; without --device cuda the ranks are emulated, with a note (--dry-run: nothing runs)."""
    if launch.resolve_device("auto", 1) == "cuda":
        pytest.skip("a GPU is visible here")
    code, out, err = main(capsys, "--scenario", "smoke", "--share-gpu", "--device", "cuda", "--out", tmp_path)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--share-gpu with --device cuda" in err
    code, out, err = main(capsys, "--scenario", "smoke", "--share-gpu", "--dry-run", "--out", tmp_path)
    assert code == 0 and "note: --share-gpu: no GPU is visible, so the 2 ranks are emulated" in err
    assert "(emulated)" in err
    argv = ["--scenario", "smoke", "--share-gpu"]
    assert fromargs.bench_request(parsers.build_parser().parse_args(argv), argv, None).share_gpu


def test_one_table_dispatches_every_command_line(tmp_path):
    """Each command line reaches its entry of cli.COMMANDS with its typed request: a first word, or a mode flag of
    the default command line (--list, --self-test, --check-predictions), or the default command itself."""
    from harness.checks.oom import command as oomcheck
    from harness.checks.predictions import command as check_predictions
    from harness.commands import history, rebuild_report
    from harness.gates import ab_command, compare_command

    run = str(tmp_path)
    assert cli.read(["list"]) == cli.read(["--list"]) == ("list", None)
    assert cli.read(["self-test"]) == cli.read(["--self-test"]) == ("self-test", None)
    name, request = cli.read(["--scenario", "smoke", "--check-predictions", "--steps", "12"])
    assert name == "check-predictions" and request.steps == 12 and request.scenario == "smoke"
    assert type(cli.read(["check-predictions", "--scenario", "smoke"])[1]) is check_predictions.Request
    name, (request, store) = cli.read(["--scenario", "smoke", "--history", str(tmp_path / "h.sqlite")])
    assert name == "bench" and request.scenario == "smoke" and store == tmp_path / "h.sqlite"
    for argv, kind in ((["report", run], rebuild_report.Request),
                       (["compare", run, run], compare_command.CompareRequest),
                       (["history", "list"], history.HistoryRequest), (["ab-gate", "--parent", run],
                                                                       ab_command.AbGateRequest),
                       (["gate-precheck", run], ab_command.GatePrecheckRequest), (["oomcheck"], oomcheck.Request)):
        name, request = cli.read(argv)
        assert name == argv[0] and type(request) is kind
    assert set(parsers.DEFINE) <= {n for n, c in cli.COMMANDS.items() if c.read is not None}
    with pytest.raises(SystemExit):  # "bench" is no first word: the default command line's parser refuses it
        cli.read(["bench", "--scenario", "smoke"])


def test_the_word_list_lists_the_scenarios_in_process(capsys):
    code, out, _ = main(capsys, "list")
    assert code == 0 and "smoke" in dict(line.split(None, 1) for line in out.splitlines())
