"""Every number a user gives is finite, in range and of the right type, checked at the boundary: a `[target]`
table (`--target FILE` or a scenario's own table), `check-remote`'s options and `check-resume --stop`. Each
mistake is one line naming the file or flag, the field and the value, exit 2, before anything is built."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from scenarios_for_tests import write_scenario
from test_mistakes import TRAINING, one_line, run_cli

RUN = Path(__file__).resolve().parent / "fixtures" / "run-v0.2"

# a [target] key and its bad value (as TOML) -> what the line must say besides the file and the key
TARGETS = {
    "cores_nan": ("cores_per_node", "nan", "nan"),
    "cores_inf": ("cores_per_node", "inf", "inf"),
    "read_denormal": ("storage_read_mb_s", "1e-320", "1e-320"),
    "read_absurd": ("storage_read_mb_s", "1e300", "1e+300"),
    "latency_inf": ("storage_latency_ms", "inf", "inf"),
    "latency_negative_inf": ("storage_latency_ms", "-inf", "-inf"),
    "iops_nan": ("storage_iops", "nan", "nan"),
    "nodes_absurd": ("nodes", "1000000000000", "1000000000000"),
    "accelerator_list": ("accelerator", '["V100-16GB"]', "['V100-16GB']"),
    "name_table": ("name", "{a = 1}", "{'a': 1}"),
    "page_cache_number": ("page_cache", "5", "5"),
}


@pytest.mark.parametrize("case", list(TARGETS))
def test_a_bad_target_file_is_one_line(case, tmp_path, capsys):
    key, value, shown = TARGETS[case]
    path = tmp_path / "t.toml"
    path.write_text(f"[target]\n{key} = {value}\n")
    run = Path(shutil.copytree(RUN, tmp_path / "run"))
    one_line(run_cli(["report", run, "--target", path]), capsys.readouterr().err,
             (str(path), f"[target] {key} = {shown}"))


@pytest.mark.parametrize("case", ["cores_nan", "read_denormal", "latency_inf", "iops_nan", "accelerator_list",
                                  "name_table"])
def test_a_bad_target_table_of_a_scenario_is_one_line(case, tmp_path, capsys):
    key, value, shown = TARGETS[case]
    path = write_scenario(tmp_path / "s.toml", None, training=TRAINING, tables=f"[target]\n{key} = {value}\n")
    one_line(run_cli(["--scenario", path, "--dry-run", "--data-dir", tmp_path / "d", "--out", tmp_path / "o"]),
             capsys.readouterr().err, (str(path), f"[target] {key} = {shown}"))


REMOTE = {  # check-remote's options -> what the line names
    "samples_zero": (["--samples", "0"], "--samples = 0"),
    "samples_below_a_batch": (["--samples", "3"], "--samples = 3 must be a whole number at least 16"),
    "seconds_zero": (["--seconds", "0"], "--seconds = 0.0"),
    "seconds_negative": (["--seconds", "-1"], "--seconds = -1.0"),
    "seconds_nan": (["--seconds", "nan"], "--seconds = nan"),
    "seconds_inf": (["--seconds", "inf"], "--seconds = inf"),
    "bandwidth_negative": (["--bandwidths", "20", "-5"], "--bandwidths = -5.0"),
    "bandwidth_nan": (["--bandwidths", "nan"], "--bandwidths = nan"),
    "rounds_zero": (["--rounds", "0"], "--rounds = 0"),
}


@pytest.mark.parametrize("case", list(REMOTE))
def test_check_remote_refuses_a_bad_option_before_building_anything(case, capsys, monkeypatch):
    from harness.checks.remote import sweep as remotesweep

    def built(*_):
        raise AssertionError("the namespace and the store were built before the options were checked")

    monkeypatch.setattr(remotesweep, "run", built)
    args, names = REMOTE[case]
    one_line(run_cli(["check-remote", *args]), capsys.readouterr().err, names)


def test_check_resume_refuses_a_stop_beyond_the_epoch_and_creates_nothing(tmp_path, capsys):
    out = tmp_path / "out"
    code = run_cli(["check-resume", "--scenario", "loaders", "--samples", "64", "--loader", "workers",
                    "--in-process", "--stop", "1000", "--data-dir", tmp_path / "d", "--out", out])
    one_line(code, capsys.readouterr().err, ("--stop 1000", "batches"))
    assert not out.exists() or not any(out.iterdir())  # no empty run directory left
