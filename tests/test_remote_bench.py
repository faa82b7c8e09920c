"""The bench and a scenario's [remote] table (harness.run.remoterun.with_remote): a scenario without one runs
as it is; under torchrun one is refused in one line, before any store starts; a run against the project's own
store on loopback has its readers' counters, told to them through the launch config, in each visit's line and
in remote.md. The store, the link and the figures themselves are tested in test_s3_storage.py,
test_remote_link.py and test_remote_tier.py, and the whole path with the shaped link by scripts/s3_check.sh."""
from __future__ import annotations

import json

import pytest

from harness.config import scenario
from harness.errors import UsageError
from harness.run import remoterun


def test_a_scenario_without_remote_runs_as_it_is(tmp_path):
    sc = scenario.load("smoke")
    assert remoterun.with_remote(sc, False, tmp_path, lambda counters: 7 if counters is None else 0) == 7


def test_remote_under_torchrun_is_one_line_before_anything_starts(tmp_path):
    sc = scenario.load("remote")
    assert sc.remote is not None
    with pytest.raises(UsageError, match="under torchrun it is not supported") as err:
        remoterun.with_remote(sc, True, tmp_path, lambda counters: pytest.fail("ran"))
    assert "\n" not in str(err.value)


SCENARIO = ('[hardware]\naccelerator = "V100-16GB"\ncount = 1\n[dataset]\nsamples = 32\nprofile = "tiny"\n'
            '[training]\nbatch_size = 8\nimage_size = 32\nwarmup_steps = 1\nsteps = 2\nworkers = {workers}\n'
            '[remote]\nnamespace = false\n[matrix]\nstorage = [{{ name = "s3", format = "raw", '
            'url = "s3://{bucket}/data" }}]\n')


def _remote_run(tmp_path, workers: int, bucket: str) -> int:
    """`run_bench.py` on a one-cell [remote] scenario with the store on loopback."""
    pytest.importorskip("moto.server", reason="the local object store needs moto's server mode")
    pytest.importorskip("obstore", reason="the s3 storage reads through obstore")
    from harness import cli

    path = tmp_path / "r.toml"
    path.write_text(SCENARIO.format(workers=workers, bucket=bucket))
    return cli.main(["--scenario", str(path), "--out", str(tmp_path / "out"), "--data-dir", str(tmp_path / "data"),
                     "--quiet"])


@pytest.mark.slow
def test_a_bucket_that_does_not_exist_is_one_line_and_exit_2(tmp_path, capsys):
    """The scenario's store runs, but the storage's url names another bucket: writing the data there fails
    as one line naming the URL and the remedy, exit 2 (not an internal error)."""
    code = _remote_run(tmp_path, 0, "no-such-bucket")
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err[-1].startswith("run_bench.py: error: s3://no-such-bucket/data/")
    assert "NoSuchBucket" in err[-1] and "create the bucket" in err[-1]


@pytest.mark.slow
def test_a_remote_run_s_readers_count_into_its_records(tmp_path, capsys):
    """A [remote] scenario on loopback, its reads in a DataLoader worker: each visit's line has the remote
    figures of its window and remote.md the whole run's, from the counters folder the launch config named."""
    code = _remote_run(tmp_path, 1, "dlbench")
    assert code == 0, capsys.readouterr().err
    (run_dir,) = (tmp_path / "out").iterdir()
    (line,) = [json.loads(text) for text in (run_dir / "cells.jsonl").read_text().splitlines()]
    assert line["figures"]["remote_requests_per_sample"] == pytest.approx(2.0)  # raw: a GET per field read
    assert line["figures"]["remote_wait_ms_per_sample"] > 0
    remote = (run_dir / "remote.md").read_text().splitlines()
    assert remote[-1].startswith("| s3(format=raw,") and remote[-1].endswith("| obstore |")
    assert "Remote store (per sample, over the window)" in (run_dir / "report.md").read_text()
