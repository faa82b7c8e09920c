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


def test_a_bucket_that_does_not_exist_is_one_line_and_exit_2(tmp_path, capsys):
    """The scenario's store runs, but the storage's url names another bucket: writing the data there fails
    as one line naming the URL and the remedy, exit 2 (not an internal error)."""
    pytest.importorskip("moto.server", reason="the local object store needs moto's server mode")
    pytest.importorskip("obstore", reason="the s3 storage reads through obstore")
    from harness import cli

    path = tmp_path / "r.toml"
    path.write_text('[hardware]\naccelerator = "V100-16GB"\ncount = 1\n[dataset]\nsamples = 32\nprofile = "tiny"\n'
                    '[training]\nbatch_size = 8\nimage_size = 32\nwarmup_steps = 1\nsteps = 2\nworkers = 0\n'
                    '[remote]\nnamespace = false\n[matrix]\nstorage = [{ name = "s3", format = "raw", '
                    'url = "s3://no-such-bucket/data" }]\n')
    code = cli.main(["--scenario", str(path), "--out", str(tmp_path / "out"), "--data-dir", str(tmp_path / "data"),
                     "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err[-1].startswith("run_bench.py: error: s3://no-such-bucket/data/")
    assert "NoSuchBucket" in err[-1] and "create the bucket" in err[-1]
