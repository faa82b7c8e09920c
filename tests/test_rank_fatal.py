"""A rank's error that no later cell could escape ends the run with its own line (supervisor.fatal_error, which
the launcher raises as a UsageError: one line, exit 2); any other error fails its cell only."""
from __future__ import annotations

from harness.run import supervisor
from strategies.remote.s3client import RemoteError

LINE = "s3://bucket/data/shard-00003.tar: the object is missing; materialise the storage again (--regenerate)"


def test_a_remote_error_re_raised_by_a_dataloader_is_fatal_with_its_own_line(tmp_path):
    # what torch's DataLoader re-raises in the rank: the same type, the worker's traceback as its text
    wrapped = RemoteError("Caught RemoteError in DataLoader worker process 0.\nOriginal Traceback (most recent "
                          f"call last):\n  File \"x.py\", line 1, in read\nstrategies.remote.s3client.RemoteError: "
                          f"{LINE}\n")
    supervisor._write_rank_error(tmp_path, 1, wrapped)
    assert supervisor.fatal_error(tmp_path) == LINE


def test_any_other_error_fails_its_cell_only(tmp_path):
    supervisor._write_rank_error(tmp_path, 0, RuntimeError("a bug in a strategy"))
    assert supervisor.fatal_error(tmp_path) is None
    assert (supervisor.heartbeat_dir(tmp_path) / "rank0.error").read_text() == "RuntimeError: a bug in a strategy"
