"""The command line: --list, and bad input as one line on stderr with exit code 2 and no traceback."""
from __future__ import annotations

import pytest

from conftest import run_bench


def test_list_prints_each_scenario_with_description():
    proc = run_bench("--list")
    assert proc.returncode == 0
    lines = dict(line.split(None, 1) for line in proc.stdout.splitlines())
    assert "4xV100" in lines and "smoke" in lines and "V100" in lines["4xV100"]


@pytest.mark.parametrize("args, message", [
    (["--scenario", "nope"], "unknown scenario 'nope'; available: 1xV100, 4xV100"),
    (["--scenario", "smoke", "--batch-size", "0"], "--batch-size = 0 must be a positive integer"),
    (["--scenario", "smoke", "--world-size", "-1"], "--world-size = -1 must be a positive integer"),
    (["--scenario", "smoke", "--device", "cuda"], "--device cuda needs 2 GPUs"),
    (["--scenario", "smoke", "--out", "/proc/no/such"], "output directory /proc/no/such is not writable"),
    (["--scenario", "smoke", "--batch-size", "x"], "invalid int value: 'x'"),
    (["--scenario", "smoke", "--plugin", "no_such_module"], "--plugin no_such_module: cannot import"),
    ([], "give --scenario NAME"),
])
def test_bad_input_is_one_line_exit_2(args, message):
    proc = run_bench(*args)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "Traceback" not in proc.stderr


def test_unwritable_data_dir_is_usage_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    proc = run_bench("--scenario", "smoke", "--data-dir", str(blocker / "sub"), "--out", str(tmp_path / "r"))
    assert proc.returncode == 2
    assert "data directory" in proc.stderr and "--data-dir" in proc.stderr
    assert "Traceback" not in proc.stderr
