"""The main job decides by default: a plain `run_bench.py --scenario 4xV100` spends the scenario's [run] budget_s
on passes until its answer is decided (harness.config.request.BenchRequest.settled_budget_s); --budget replaces
it, --repeats N and --quick run the passes asked for and no more."""
from __future__ import annotations

import pytest

from harness import cli
from harness.config import scenario
from harness.config.request import BenchRequest
from harness.errors import UsageError


def request_of(*argv: str) -> BenchRequest:
    argv = list(argv)
    return cli.bench_request(cli.build_parser().parse_args(argv), argv, None)


def test_the_main_job_has_a_budget_and_the_ci_scenario_none():
    assert scenario.load("4xV100").budget_s > 0  # the main job decides; a test fails if the budget goes
    assert scenario.load("ci").budget_s == 0 and scenario.load("smoke").budget_s == 0  # one pass, as before


@pytest.mark.parametrize("argv, settled", [
    ((), 540.0),  # the scenario's [run] budget_s
    (("--budget", "90s"), 90.0),
    (("--repeats", "3"), 0.0),  # the passes asked for
    (("--repeats", "3", "--budget", "5m"), 300.0),
    (("--quick",), 0.0),
])
def test_the_budget_settles_from_the_command_line_then_the_scenario(argv, settled):
    assert request_of("--scenario", "4xV100", *argv).settled_budget_s(540.0) == settled


def test_quick_with_a_budget_or_repeats_is_one_line_exit_2(capsys):
    assert cli.main(["--scenario", "4xV100", "--quick", "--budget", "5m"]) == 2
    err = capsys.readouterr().err
    assert "--quick is one pass with no budget" in err and "Traceback" not in err
    assert cli.main(["--scenario", "4xV100", "--quick", "--repeats", "2"]) == 2


def test_a_negative_budget_in_a_scenario_names_the_field(tmp_path, capsys):
    text = scenario.resolve_path("smoke").read_text() + "\n[run]\nbudget_s = -5\n"
    (tmp_path / "s.toml").write_text(text)
    with pytest.raises(UsageError, match=r"s.toml \[run\] budget_s = -5 must be zero or more"):
        scenario.load(str(tmp_path / "s.toml"))
