"""The project's own S3-compatible object store: moto's server mode, started on this machine,
waited for, its bucket created, and stopped on any exit.

``ObjectServer(bucket)`` is a context manager. Entering it starts ``python -m moto.server`` bound
to loopback on a free port (or, given ``netns`` and ``host``, inside that network namespace on that
address: see harness.lab.link), in a session of its own; waits until it answers HTTP; creates the
bucket. Leaving it, the interpreter exiting (atexit) or SIGTERM / SIGINT (``stop_on_signals``)
stops the server: SIGTERM to its process group, SIGKILL after 5 s. ``env()`` is the standard AWS
environment a client reads (endpoint, region, keys), so every S3 client, in this process and in the
ranks it starts, finds the server the standard way.

``request_cost(server)`` measures the server's own cost per request (a small GET from this machine
on an unshaped path: the wall time per request and the server process's CPU seconds per request,
from /proc/PID/stat), so that a figure bound by the server is never read as the network's.
"""
from __future__ import annotations

import atexit
import ipaddress
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from harness.errors import UsageError
from harness.lab.link import alive

START_TIMEOUT_S = 30.0
STOP_GRACE_S = 5.0
KEYS = {"AWS_ACCESS_KEY_ID": "dlbench", "AWS_SECRET_ACCESS_KEY": "dlbench-local", "AWS_DEFAULT_REGION": "us-east-1"}
ENV_KEYS = (*KEYS, "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ALLOW_HTTP", "AWS_EC2_METADATA_DISABLED")
INSTALL = 'the local object store needs moto\'s server mode: pip install "moto[server]>=5,<6"'


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def allowed_host(host: str, namespace_hosts: tuple[str, ...] = ()) -> bool:
    """Only loopback or the project's own namespace addresses are ever contacted."""
    if host in namespace_hosts or host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class ObjectServer:
    """moto's S3 server on ``host``:``port`` (loopback and a free port by default), optionally
    inside the network namespace ``netns``; ``bucket`` created once it answers."""

    def __init__(self, bucket: str = "dlbench", host: str = "127.0.0.1", port: int = 0, netns: str = ""):
        if not allowed_host(host, (host,) if netns else ()):
            raise UsageError(f"object server host {host} is neither loopback nor the project's own namespace "
                             f"address; the project contacts nothing else")
        self.bucket, self.host, self.netns = bucket, host, netns
        self.port = port or (free_port(host) if not netns else 9000)  # the namespace is ours: nothing else listens
        self.process: subprocess.Popen | None = None
        self.log = Path(tempfile.gettempdir()) / f"dlbench-moto-{os.getpid()}-{self.port}.log"

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    def env(self) -> dict[str, str]:
        """The AWS environment that points every standard client at this server."""
        # not AWS_ENDPOINT_URL_S3: obstore lets that one override an explicit endpoint_url
        return {**KEYS, "AWS_ENDPOINT_URL": self.endpoint, "AWS_ALLOW_HTTP": "true",
                "AWS_EC2_METADATA_DISABLED": "true"}

    def start(self) -> ObjectServer:
        remove_dead_logs()
        try:
            import moto.server  # noqa: F401
            import werkzeug  # noqa: F401  (moto's server mode)
        except ImportError:
            raise UsageError(INSTALL) from None
        command = [sys.executable, "-m", "moto.server", "-H", self.host, "-p", str(self.port)]
        if self.netns:
            command = ["ip", "netns", "exec", self.netns] + command
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            start_new_session=True, preexec_fn=_die_with_parent)
        atexit.register(self.stop)
        try:
            self._wait()
            self._create_bucket()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise UsageError(f"the object server exited with {self.process.returncode} before answering on "
                                 f"{self.endpoint}: {self.log_tail()}; see {self.log}")
            try:
                with urllib.request.urlopen(self.endpoint + "/", timeout=1.0):
                    return
            except urllib.error.HTTPError:
                return  # it answered
            except (urllib.error.URLError, OSError):
                time.sleep(0.1)
        raise UsageError(f"the object server did not answer on {self.endpoint} within {START_TIMEOUT_S:.0f} s; "
                         f"see {self.log}")

    def _create_bucket(self) -> None:
        import boto3

        client = boto3.client("s3", endpoint_url=self.endpoint, region_name=KEYS["AWS_DEFAULT_REGION"],
                              aws_access_key_id=KEYS["AWS_ACCESS_KEY_ID"],
                              aws_secret_access_key=KEYS["AWS_SECRET_ACCESS_KEY"])
        client.create_bucket(Bucket=self.bucket)

    def log_tail(self) -> str:
        try:
            lines = self.log.read_text(errors="replace").strip().splitlines()
        except OSError:
            return "(no log)"
        return " | ".join(lines[-3:]) or "(empty log)"

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self) -> None:
        """SIGTERM to the server's process group, SIGKILL after the grace; idempotent."""
        process, self.process = self.process, None
        if process is None:
            return
        atexit.unregister(self.stop)
        if process.poll() is None:
            _signal_group(process.pid, signal.SIGTERM)
            try:
                process.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                _signal_group(process.pid, signal.SIGKILL)
                process.wait()
        self.log.unlink(missing_ok=True)

    def __enter__(self) -> ObjectServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def remove_dead_logs() -> list[Path]:
    """The moto logs of runs whose process is gone (``dlbench-moto-<pid>-<port>.log``), removed."""
    removed = []
    for log in Path(tempfile.gettempdir()).glob("dlbench-moto-*-*.log"):
        pid = log.name.split("-")[2]
        if pid.isdigit() and not alive(int(pid)):
            log.unlink(missing_ok=True)
            removed.append(log)
    return removed


def _die_with_parent() -> None:
    """In the server's process before exec: SIGTERM when the process that started it dies, even by
    SIGKILL (prctl PR_SET_PDEATHSIG; kept across exec), so that no server outlives its run."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)  # 1: PR_SET_PDEATHSIG


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass


class stop_on_signals:  # noqa: N801  (a context manager used like a function)
    """Within it SIGTERM and SIGINT raise SystemExit, so that every ``with``/``finally``/atexit
    that stops what the project started runs; the previous handlers come back after."""

    def __enter__(self):
        self._old = {s: signal.signal(s, self._raise) for s in (signal.SIGTERM, signal.SIGINT)}
        return self

    @staticmethod
    def _raise(signum, frame):
        raise SystemExit(128 + signum)

    def __exit__(self, *exc):
        for s, handler in self._old.items():
            signal.signal(s, handler)


@dataclass(frozen=True)
class RequestCost:
    requests: int
    wall_ms_per_request: float  # one client, one request at a time, unshaped
    server_cpu_ms_per_request: float  # the server process's user + system CPU per request

    def line(self) -> str:
        return (f"object server's own cost: {self.wall_ms_per_request:.2f} ms per small GET (one client, unshaped), "
                f"{self.server_cpu_ms_per_request:.2f} ms of its CPU per request, over {self.requests} requests: "
                f"at most {1000 / max(self.wall_ms_per_request, 1e-9):.0f} requests/s from one client")


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _timed_gets(endpoint: str, bucket: str, requests: int, size: int) -> float:
    """Seconds for ``requests`` sequential small range GETs (after a warm-up) from this process."""
    import boto3

    client = boto3.client("s3", endpoint_url=endpoint, region_name=KEYS["AWS_DEFAULT_REGION"],
                          aws_access_key_id=KEYS["AWS_ACCESS_KEY_ID"],
                          aws_secret_access_key=KEYS["AWS_SECRET_ACCESS_KEY"])
    client.put_object(Bucket=bucket, Key="_probe/small", Body=os.urandom(size))
    for _ in range(10):  # connection and server warm-up
        client.get_object(Bucket=bucket, Key="_probe/small")["Body"].read()
    t0 = time.perf_counter()
    for _ in range(requests):
        client.get_object(Bucket=bucket, Key="_probe/small", Range="bytes=0-511")["Body"].read()
    return time.perf_counter() - t0


def request_cost(server: ObjectServer, requests: int = 200, size: int = 1024) -> RequestCost:
    """The server's own cost per small GET, measured now (see the module's docstring). With the
    server in a namespace the probe client runs inside it too (its traffic crosses the namespace's
    loopback, unshaped)."""
    cpu0 = _cpu_seconds(server.process.pid)
    if server.netns:
        code = ("import sys; from harness.lab.server import _timed_gets; "
                f"print(_timed_gets({server.endpoint!r}, {server.bucket!r}, {requests}, {size}))")
        done = subprocess.run(["ip", "netns", "exec", server.netns, sys.executable, "-c", code],
                              capture_output=True, text=True, cwd=Path(__file__).resolve().parents[2])
        if done.returncode != 0:
            raise UsageError(f"the object server's cost probe failed in namespace {server.netns}: "
                             f"{done.stderr.strip().splitlines()[-1:]}")
        wall = float(done.stdout.strip().splitlines()[-1])
    else:
        wall = _timed_gets(server.endpoint, server.bucket, requests, size)
    cpu = _cpu_seconds(server.process.pid) - cpu0
    return RequestCost(requests, 1000 * wall / requests, 1000 * cpu / (requests + 12))
