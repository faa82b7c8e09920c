"""harness.data.pagecache.drop: a freshly written file (dirty pages) is read from the device after the drop,
whether its pages are flushed file by file or by one sync() for many files."""
from __future__ import annotations

import os

import pytest

from harness.data import pagecache
from harness.measure.telemetry import read_bytes


@pytest.mark.parametrize("sync_once_above", [0, 1000])
def test_a_dropped_file_is_read_from_the_device(tmp_path, monkeypatch, sync_once_above):
    if read_bytes(os.getpid()) is None:
        pytest.skip("no /proc/<pid>/io here")
    monkeypatch.setattr(pagecache, "SYNC_ONCE_FILES", sync_once_above)
    files = [tmp_path / f"f{i}" for i in range(3)]
    for f in files:
        f.write_bytes(os.urandom(1 << 20))  # dirty, in the page cache
    pagecache.drop(files)
    before = read_bytes(os.getpid())
    for f in files:
        f.read_bytes()
    assert read_bytes(os.getpid()) - before >= 3 << 20
