"""The project's own object server and shaped link for real: moto's server started, answering, stopped on
leaving, on SIGTERM and when the process dies of an error; a network namespace with a veth pair shaped by the
kernel's tc, the server inside it, the loopback never shaped, and nothing left behind after a run or a failed
run. Skipped only without root or tc (the reason is printed)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("moto.server", reason="the local object store needs moto's server mode: pip install 'moto[server]'")
pytestmark = pytest.mark.slow  # servers, namespaces and child processes of their own

from harness.errors import UsageError  # noqa: E402
from harness.lab import link  # noqa: E402
from harness.lab.link import Shape, ShapedLink, has_netem, leftovers, missing_tools  # noqa: E402
from harness.lab.server import ObjectServer, allowed_host, request_cost  # noqa: E402
from harness.lab.session import session, settings  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
NO_LINK = missing_tools()
needs_link = pytest.mark.skipif(bool(NO_LINK), reason=NO_LINK or "root and tc present")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "Z" not in Path(f"/proc/{pid}/stat").read_text().split()[2]


def test_server_answers_then_is_stopped():
    with ObjectServer("dlbench") as server:
        pid = server.process.pid
        assert server.running()
        with urllib.request.urlopen(server.endpoint + "/dlbench", timeout=5) as answer:  # the bucket exists
            assert answer.status == 200
        cost = request_cost(server, requests=20)
        assert cost.server_cpu_ms_per_request > 0 and cost.wall_ms_per_request > 0
    assert not _alive(pid)


def test_only_loopback_or_our_namespace_is_contacted():
    assert allowed_host("127.0.0.1") and allowed_host("localhost")
    assert not allowed_host("10.0.0.5") and not allowed_host("s3.amazonaws.com")
    with pytest.raises(UsageError, match="neither loopback nor the project's own namespace address"):
        ObjectServer(host="192.0.2.10")


CHILD = """
import os, sys, time
sys.path.insert(0, {repo!r})
from harness.lab.session import session, settings
with session(settings("t.toml", {raw!r}), measure_cost=False) as s:
    print(s.server.process.pid, s.link.netns if s.link else "-", flush=True)
    if {fail!r}:
        raise RuntimeError("a run that fails")
    time.sleep(60)
"""


def _child(raw: dict, fail: bool = False) -> subprocess.Popen:
    code = CHILD.format(repo=str(REPO), raw=raw, fail=fail)
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_sigterm_stops_the_server_it_started():
    child = _child({"namespace": False})
    pid = int(child.stdout.readline().split()[0])
    assert _alive(pid)
    child.send_signal(signal.SIGTERM)
    assert child.wait(30) == 128 + signal.SIGTERM
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(pid), "the object server outlived the process that started it"


@needs_link
def test_link_is_shaped_and_loopback_is_not():
    with ShapedLink(Shape(bandwidth_mb_s=25)) as link, \
            ObjectServer("dlbench", host=link.server_ip, netns=link.netns) as server:
        host_q, ns_q = link.qdiscs()
        assert "rate 200Mbit" in host_q and "rate 200Mbit" in ns_q
        lo = subprocess.run(["tc", "qdisc", "show", "dev", "lo"], capture_output=True, text=True).stdout
        assert "tbf" not in lo and "netem" not in lo  # the ranks' loopback traffic is never shaped
        import boto3

        client = boto3.client("s3", endpoint_url=server.endpoint, **_keys(server))
        client.put_object(Bucket="dlbench", Key="x", Body=os.urandom(2 << 20))
        assert len(client.get_object(Bucket="dlbench", Key="x")["Body"].read()) == 2 << 20
        stats = subprocess.run(["ip", "netns", "exec", link.netns, "tc", "-s", "qdisc", "show", "dev",
                                link.ns_dev], capture_output=True, text=True).stdout
        sent = int(stats.split("Sent ")[1].split()[0])
        assert sent >= 2 << 20  # the response crossed the namespace end's qdisc
    assert leftovers(os.getpid()) == []


def _keys(server) -> dict:
    env = server.env()
    return {"region_name": env["AWS_DEFAULT_REGION"], "aws_access_key_id": env["AWS_ACCESS_KEY_ID"],
            "aws_secret_access_key": env["AWS_SECRET_ACCESS_KEY"]}


@needs_link
@pytest.mark.parametrize("how", ["error", "sigterm"])
def test_nothing_is_left_after_a_failed_or_killed_run(how):
    child = _child({"bandwidth_mb_s": 50}, fail=how == "error")
    first = child.stdout.readline().split()
    pid, netns = int(first[0]), first[1]
    if how == "sigterm":
        assert netns in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        child.send_signal(signal.SIGTERM)
    child.wait(30)
    assert not _alive(pid)
    assert leftovers(child.pid) == [], f"left behind after a {how}: {leftovers(child.pid)}"


@needs_link
def test_latency_and_loss_need_netem():
    shape = Shape(latency_ms=20, bandwidth_mb_s=200, loss_pct=0.5)
    if has_netem():
        assert link.qdisc_args(shape, True) == ["netem", "limit", "100000", "delay", "10ms", "loss", "0.5%",
                                                      "rate", "1600mbit"]
        with ShapedLink(shape) as shaped:
            assert "delay 10ms" in shaped.qdiscs()[0]
    else:
        with pytest.raises(UsageError, match="need the kernel's netem qdisc, which this kernel lacks"):
            ShapedLink(shape)
    assert leftovers(os.getpid()) == []


@needs_link
def test_session_sets_and_restores_the_environment():
    before = os.environ.get("AWS_ENDPOINT_URL")
    with session(settings("t.toml", {"bandwidth_mb_s": 100}), measure_cost=False) as s:
        assert os.environ["AWS_ENDPOINT_URL"] == s.server.endpoint
        assert s.server.endpoint.startswith(f"http://{s.link.server_ip}:")
        assert "object store: moto at" in s.header()[0]
    assert os.environ.get("AWS_ENDPOINT_URL") == before
    assert leftovers(os.getpid()) == []


@needs_link
def test_a_killed_runs_namespace_link_and_log_are_removed_by_the_next_run():
    """SIGKILL (or the OOM killer) runs no exit handler: the namespace dlbench-<pid>, its veth and the moto log
    stayed. The next run's link (and server) remove what a dead run left, and never a live run's."""
    from harness.lab.server import remove_dead_logs

    child = _child({"bandwidth_mb_s": 50})
    first = child.stdout.readline().split()
    assert first[1] == f"dlbench-{child.pid}"
    child.kill()  # SIGKILL: no handler runs
    child.wait(30)
    assert leftovers(child.pid), "a SIGKILLed run should have left its namespace (else this test tests nothing)"
    logs = list(Path(tempfile.gettempdir()).glob(f"dlbench-moto-{child.pid}-*.log"))
    assert logs
    with ShapedLink(Shape(bandwidth_mb_s=25)) as shaped:  # the next remote run
        assert leftovers(child.pid) == [] and leftovers(os.getpid())  # the dead run's gone, this run's kept
        assert shaped.created
    remove_dead_logs()
    assert not any(p.exists() for p in logs)


@needs_link
def test_any_run_removes_what_a_killed_remote_run_left(monkeypatch):
    """Not only the next remote run: every run (harness.run.remoterun.with_remote, local scenarios included)."""
    from types import SimpleNamespace

    from harness.run import remoterun

    child = _child({"bandwidth_mb_s": 50})
    child.stdout.readline()
    child.kill()
    child.wait(30)
    assert leftovers(child.pid)
    assert remoterun.with_remote(SimpleNamespace(remote=None), False, Path("."), lambda folder: 0) == 0
    assert leftovers(child.pid) == []
    assert not list(Path(tempfile.gettempdir()).glob(f"dlbench-moto-{child.pid}-*.log"))
