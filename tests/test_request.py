"""The typed request at the door (harness.cli -> harness.config.request): the command line is settled once,
and what a run was asked for reaches every place that needs it, the ends of an interrupted run included."""
from __future__ import annotations

import dataclasses
import os
import signal

import pytest
from procs import cells, run_dir, start, wait_for

from harness import cli
from harness.config.request import BenchRequest, Torchrun

TARGET = """[target]
gpus_per_node = 2
cores_per_node = 8
"""


def request_of(*argv: str, resume=None) -> BenchRequest:
    argv = list(argv)
    return cli.bench_request(cli.build_parser().parse_args(argv), argv, resume)


def test_the_request_is_frozen_and_settles_the_order_seed_once():
    r = request_of("--scenario", "smoke", "--steps", "3", "--plugin", "tests.plugins.planted")
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.order_seed = 1
    assert isinstance(r.order_seed, int) and r.plugins == ("tests.plugins.planted",)
    assert r.overrides.steps == 3 and r.overrides.given()["steps"] == 3 and r.overrides.given()["samples"] is None
    assert request_of("--scenario", "smoke", "--order-seed", "7").order_seed == 7


def test_the_torchrun_identity_comes_from_torchrun_s_environment():
    assert Torchrun.from_env({}) is None
    t = Torchrun.from_env({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"})
    assert (t.rank, t.local_rank, t.world_size, t.local_world_size) == (3, 1, 4, 2)


def test_repeats_below_one_is_one_line_exit_2(capsys):
    assert cli.main(["--scenario", "smoke", "--repeats", "0"]) == 2
    assert "--repeats = 0" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["list"], ["--list"]])
def test_list_is_a_command_and_the_old_flag_still_works(capsys, command):
    assert cli.main(command) == 0
    assert "4xV100" in capsys.readouterr().out


@pytest.mark.slow
def test_an_interrupted_runs_report_keeps_the_runs_target(tmp_path, data_dir):
    """Ctrl-C rebuilds the report over the cells written: with the target the run was given, as a finished
    run's report has it (before the request, the interrupted run's report lost its target table)."""
    target = tmp_path / "target.toml"
    target.write_text(TARGET)
    out = tmp_path / "out"
    proc, _ = start("--scenario", "smoke", "--steps", "400", "--order", "fixed", "--quiet", "--target", str(target),
                    "--data-dir", str(data_dir), "--out", str(out))
    run = wait_for(lambda: run_dir(out), 120, "the run directory", proc)
    wait_for(lambda: len(cells(run)) >= 1, 300, "the first cell's line", proc)
    os.kill(proc.pid, signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr[-2000:]
    assert len(cells(run)) < 3  # cells were left: the signal came mid-run
    report = (run / "report.md").read_text()
    assert "On the target (modelled): 1 node(s) x 2 V100-16GB, 8 cores/node" in report
