"""The disk cache tier (size bound, least recently used evicted, shared by processes, hits counted), the remote
figures merged from several processes' counters, and the [remote] table's mistakes as one line."""
from __future__ import annotations

import json
import multiprocessing as mp

import pytest

from harness.config import scenario
from harness.errors import UsageError
from harness.lab.link import Shape
from harness.lab.session import settings
from harness.measure import remotecounters
from harness.run import remoterun
from strategies.remote.disktier import DiskTier
from strategies.remote.s3client import LAT_BINS, latency_bin


def test_tier_keeps_at_most_its_capacity_and_evicts_the_least_recent(tmp_path):
    tier = DiskTier(tmp_path, 3000)
    for key in "abc":
        tier.put(key, key.encode() * 1000)
    assert tier.get("a") == b"a" * 1000  # a is now the most recent: b is the least
    tier.put("d", b"d" * 1000)
    assert tier.resident_bytes() <= 3000
    assert tier.get("b") is None and tier.get("a") is not None and tier.get("d") is not None
    assert tier.stats()["disk_evictions"] == 1
    tier.put("huge", b"x" * 4000)  # larger than the whole tier: never kept
    assert tier.get("huge") is None and tier.resident_bytes() <= 3000


def test_tier_counts_hits_and_misses_and_fetches_once(tmp_path):
    tier = DiskTier(tmp_path, 1 << 20)
    loads = []
    for _ in range(3):
        assert tier.fetch("k", lambda: loads.append(1) or b"value") == b"value"
    assert loads == [1]
    s = tier.stats()
    assert (s["disk_hits"], s["disk_misses"]) == (2, 1)


def _put_many(directory: str, start: int) -> None:
    tier = DiskTier(directory, 10_000)
    for i in range(start, start + 40):
        tier.put(f"k{i}", b"x" * 1000)


@pytest.mark.slow
def test_tier_stays_bounded_with_two_processes_writing(tmp_path):
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_put_many, args=(str(tmp_path), s)) for s in (0, 100)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert all(p.exitcode == 0 for p in procs)
    assert DiskTier(tmp_path, 10_000).resident_bytes() <= 10_000


def test_figures_merge_every_process(tmp_path):
    bins = [0] * LAT_BINS
    for seconds in [0.010] * 98 + [0.200] * 2:
        bins[latency_bin(seconds)] += 1
    for pid, (samples, requests) in enumerate([(60, 70), (40, 30)]):
        half = [b // 2 if pid == 0 else b - b // 2 for b in bins]
        (tmp_path / f"{pid}.jsonl").write_text(json.dumps({
            "samples": samples, "requests": requests, "bytes": 5_000_000, "lists": 1, "retries": pid,
            "puts": 0, "wait_s": 0.5, "latency_bins": half, "disk_hits": 3, "disk_misses": 1, "t": 1.0}) + "\n")
    f = remotecounters.figures(tmp_path)
    assert (f.samples, f.requests, f.processes, f.retries) == (100, 100, 2, 1)
    assert f.requests_per_sample == 1.0 and f.mb_per_sample == pytest.approx(0.1)
    assert f.lists_per_sample == pytest.approx(0.02) and f.wait_ms_per_sample == pytest.approx(10.0)
    assert f.latency_p50_ms == pytest.approx(10, rel=0.05) and f.latency_p99_ms == pytest.approx(200, rel=0.05)
    assert f.disk_hit_pct == pytest.approx(75)
    lines = remoterun.table([remoterun.row("c", f)]).splitlines()
    assert lines[0] == ("| cell | req/sample | MB/sample | LIST/sample | lat p50 ms | lat p99 ms | "
                        "net wait ms/sample/worker | disk hit % | retries | client |")
    assert lines[2] == "| c | 1.00 | 0.100 | 0.020 | 10.0 | 195.4 | 10.00 | 75 | 1 | - |"


def _line(t: float, samples: int, requests: int, slow: int = 0, label: str = "s3(a)") -> str:
    bins = {str(latency_bin(0.010)): requests - slow, **({str(latency_bin(0.5)): slow} if slow else {})}
    return json.dumps({"label": label, "client": "obstore", "t": t, "samples": samples, "requests": requests,
                       "bytes": 1000 * requests, "wait_s": samples / 100, "latency_bins": bins}) + "\n"


def test_figures_over_a_window_count_what_happened_inside_it(tmp_path):
    """A process's cumulative lines: warm-up (t 1-2), the window (2.5-4), after it (5): only the window's
    difference counts, and a process that wrote nothing inside the window adds nothing."""
    (tmp_path / "w.jsonl").write_text(_line(1, 16, 16, slow=16) + _line(2, 32, 32, slow=32) + _line(3, 48, 40, 32)
                                      + _line(4, 64, 48, 32) + _line(5, 80, 400, 32))
    (tmp_path / "old.jsonl").write_text(_line(0.5, 500, 900, slow=900))  # a previous visit's worker
    (tmp_path / "x.jsonl").write_text(_line(3, 8, 8, label="s3(b)"))
    f = remotecounters.figures(tmp_path, "s3(a)", window=(2.5, 4.5))
    assert (f.samples, f.requests, f.processes) == (32, 16, 1)
    assert f.requests_per_sample == 0.5 and f.mb_per_sample == pytest.approx(16_000 / 1e6 / 32)
    assert f.latency_p99_ms == pytest.approx(10, rel=0.05)  # the warm-up's slow requests are not in it
    assert f.wait_ms_per_sample == pytest.approx(10)
    whole = remotecounters.figures(tmp_path, "s3(a)")
    assert (whole.samples, whole.requests) == (80 + 500, 400 + 900)
    assert remotecounters.labels(tmp_path) == ["s3(a)", "s3(b)"]


def test_remote_table_is_read_and_checked(tmp_path):
    path = tmp_path / "r.toml"
    base = ('[hardware]\naccelerator = "V100-16GB"\ncount = 1\n[dataset]\nsamples = 64\nprofile = "tiny"\n'
            '[training]\nbatch_size = 8\nsteps = 2\n')
    path.write_text(base + "[remote]\nlatency_ms = 20\nbandwidth_mb_s = 200\n")
    sc = scenario.load(str(path))
    assert sc.remote.shape == Shape(20.0, 200.0, 0.0) and sc.remote.bucket == "dlbench" and sc.remote.namespace
    path.write_text(base + "[remote]\nlatency = 20\n")
    with pytest.raises(UsageError, match=r"r.toml: unknown field \[remote\] latency; known: latency_ms"):
        scenario.load(str(path))


@pytest.mark.parametrize("raw, message", [
    ({"bandwidth_mb_s": -1}, r"\[remote\] bandwidth_mb_s = -1.0 must be zero or more"),
    ({"loss_pct": 100}, r"\[remote\] loss_pct = 100 must be below 100"),
    ({"latency_ms": "20"}, r"\[remote\] latency_ms = '20' must be of type float"),
    ({"bucket": "B"}, r"\[remote\] bucket = 'B' is not a valid S3 bucket name"),
    ({"namespace": False, "latency_ms": 5}, r"namespace = false puts the server on loopback, which is never shaped"),
])
def test_remote_mistakes_are_one_line(raw, message):
    with pytest.raises(UsageError, match=message) as err:
        settings("s.toml", raw)
    assert "\n" not in str(err.value) and str(err.value).startswith("s.toml")


def test_no_remote_table_is_none():
    assert settings("s.toml", None) is None
