"""The bench and a scenario's [remote] table (harness.commands.bench.with_remote): a scenario without one runs
as it is; under torchrun one is refused in one line, before any store starts. The store, the link and the
figures themselves are tested in test_s3_storage.py, test_remote_link.py and test_remote_tier.py, and the
whole path by scripts/s3_check.sh."""
from __future__ import annotations

import dataclasses

import pytest

from harness.commands import bench
from harness.config import scenario
from harness.config.request import BenchRequest, Torchrun
from harness.errors import UsageError


def test_a_scenario_without_remote_runs_as_it_is(tmp_path):
    sc = scenario.load("smoke")
    assert bench.with_remote(sc, BenchRequest("smoke", (), 0), tmp_path, lambda: 7) == 7


def test_remote_under_torchrun_is_one_line_before_anything_starts(tmp_path):
    sc = scenario.load("remote")
    assert sc.remote is not None
    request = dataclasses.replace(BenchRequest("remote", (), 0), torchrun=Torchrun(0, 0, 2, 2))
    with pytest.raises(UsageError, match="under torchrun it is not supported") as err:
        bench.with_remote(sc, request, tmp_path, lambda: pytest.fail("ran"))
    assert "\n" not in str(err.value)
