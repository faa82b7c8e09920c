"""The shaped network between the ranks and the object store: a network namespace the project
creates for the server, joined to this machine by a veth pair, shaped with the kernel's own traffic
control on both ends, and removed on any exit.

``ShapedLink(Shape(latency_ms, bandwidth_mb_s, loss_pct))`` is a context manager. Entering it
creates the namespace ``dlbench-<pid>``, the veth pair ``dlb<pid>h`` (this side) / ``dlb<pid>n``
(the namespace's side) with addresses in the private /30 ``10.213.<k>.0/30`` (k from the pid, the
first not already routed here), and one root qdisc on each end's egress: requests leave through the
host end, responses through the namespace end, so each direction is shaped. The ranks' own traffic
(gloo on loopback) never crosses the veth: it is never shaped.

What each setting does, per direction: ``latency_ms`` / 2 of delay (so the round trip gains
latency_ms), ``bandwidth_mb_s`` MB/s (10^6 bytes) of rate, ``loss_pct`` % of packets dropped. With
the kernel's ``netem`` qdisc all three are one ``netem`` qdisc; a kernel without ``sch_netem`` (tc
answers "Specified qdisc kind is unknown") still has ``tbf``, which shapes bandwidth alone: a
latency or loss asked for there is one line naming the kernel's lack and the remedy. Leaving the
link (or the interpreter exiting: atexit) deletes the namespace, which takes the veth pair and both
qdiscs with it; ``leftovers()`` lists any namespace, link or qdisc of the project's still present
(the check that nothing is left behind).
"""
from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass

from harness.errors import UsageError

PREFIX = "dlbench-"
LINK_PREFIX = "dlb"
SUBNET = "10.213"  # 10.213.<k>.0/30: k in 0..249
TBF_BURST = "256kb"
TBF_QUEUE_MS = 500  # how long a packet may wait in tbf's queue before it is dropped


@dataclass(frozen=True)
class Shape:
    latency_ms: float = 0.0  # added round trip (half each way)
    bandwidth_mb_s: float = 0.0  # 0: unlimited
    loss_pct: float = 0.0

    def label(self) -> str:
        bw = f"{self.bandwidth_mb_s:g} MB/s" if self.bandwidth_mb_s else "unlimited"
        return f"{self.latency_ms:g} ms RTT, {bw}, {self.loss_pct:g}% loss"


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def _tc(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["tc", *args], capture_output=True, text=True)


def missing_tools() -> str:
    """Why this machine cannot shape a link ("" when it can): root, ip and tc."""
    if os.geteuid() != 0:
        return "shaping the link needs root (network namespaces and tc): run as root, as CI does"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"shaping the link needs {tool}: apt-get update && apt-get install -y iproute2"
    return ""


def has_netem() -> bool:
    """Whether this kernel has the netem qdisc (probed on a dummy link of our own, removed at
    once)."""
    name = f"{LINK_PREFIX}{os.getpid()}p"
    if _ip("link", "add", name, "type", "dummy", check=False).returncode != 0:
        return False
    try:
        return _tc("qdisc", "add", "dev", name, "root", "netem", "delay", "1ms").returncode == 0
    finally:
        _ip("link", "del", name, check=False)


def qdisc_args(shape: Shape, netem: bool) -> list[str] | None:
    """The root qdisc of one end's egress for ``shape`` (None: nothing to shape)."""
    if not (shape.latency_ms or shape.bandwidth_mb_s or shape.loss_pct):
        return None
    rate = f"{shape.bandwidth_mb_s * 8:g}mbit"
    if netem:
        args = ["netem", "limit", "100000"]
        if shape.latency_ms:
            args += ["delay", f"{shape.latency_ms / 2:g}ms"]
        if shape.loss_pct:
            args += ["loss", f"{shape.loss_pct:g}%"]
        if shape.bandwidth_mb_s:
            args += ["rate", rate]
        return args
    if shape.latency_ms or shape.loss_pct:
        raise UsageError(f"[remote] latency_ms = {shape.latency_ms:g} and loss_pct = {shape.loss_pct:g} need the "
                         f"kernel's netem qdisc, which this kernel lacks (tc: 'Specified qdisc kind is unknown'); "
                         f"run on a kernel with sch_netem (modprobe sch_netem), or set both to 0 (bandwidth alone "
                         f"is shaped with tbf)")
    return ["tbf", "rate", rate, "burst", TBF_BURST, "latency", f"{TBF_QUEUE_MS}ms"]


def _subnet_index(pid: int) -> int:
    routes = _ip("-4", "route", "show", "table", "all", check=False).stdout
    for step in range(250):
        k = (pid + step) % 250
        if f"{SUBNET}.{k}." not in routes:
            return k
    raise UsageError(f"every {SUBNET}.k.0/30 (k < 250) is already routed here; remove the stale links "
                     f"(ip link show | grep {LINK_PREFIX}) and run again")


class ShapedLink:
    """A namespace for the object server, its veth pair, addresses and qdiscs; removed on
    leaving."""

    def __init__(self, shape: Shape = Shape()):
        why = missing_tools()
        if why:
            raise UsageError(why)
        self.shape = shape
        pid = os.getpid()
        self.netns = f"{PREFIX}{pid}"
        self.host_dev, self.ns_dev = f"{LINK_PREFIX}{pid}h", f"{LINK_PREFIX}{pid}n"
        self.netem = has_netem()
        self.qdisc = qdisc_args(shape, self.netem)  # a UsageError before anything is created
        self.host_ip = self.server_ip = ""
        self.created = False

    def create(self) -> ShapedLink:
        for what in remove_dead():  # a killed run's namespace and link, before this one takes an address
            print(f"remote: removed {what}, left by a run that was killed", file=sys.stderr)
        k = _subnet_index(os.getpid())
        self.host_ip, self.server_ip = f"{SUBNET}.{k}.1", f"{SUBNET}.{k}.2"
        atexit.register(self.remove)
        self.created = True
        try:
            ns = ["netns", "exec", self.netns, "ip"]
            for args in (["netns", "add", self.netns],
                         ["link", "add", self.host_dev, "type", "veth", "peer", "name", self.ns_dev],
                         ["link", "set", self.ns_dev, "netns", self.netns],
                         ["addr", "add", f"{self.host_ip}/30", "dev", self.host_dev],
                         ["link", "set", self.host_dev, "up"],
                         ns + ["addr", "add", f"{self.server_ip}/30", "dev", self.ns_dev],
                         ns + ["link", "set", self.ns_dev, "up"],
                         ns + ["link", "set", "lo", "up"]):
                _ip(*args)
            if self.qdisc:
                self._shape()
        except subprocess.CalledProcessError as err:
            self.remove()
            raise UsageError(f"creating the shaped link failed: ip {' '.join(err.cmd[1:])}: "
                             f"{(err.stderr or '').strip()}; run as root on a kernel with network namespaces "
                             f"and veth") from None
        except BaseException:
            self.remove()
            raise
        return self

    def _shape(self) -> None:
        for prefix, dev in (([], self.host_dev), (["ip", "netns", "exec", self.netns], self.ns_dev)):
            done = subprocess.run(prefix + ["tc", "qdisc", "add", "dev", dev, "root"] + self.qdisc,
                                  capture_output=True, text=True)
            if done.returncode != 0:
                raise UsageError(f"tc qdisc add dev {dev} root {' '.join(self.qdisc)} failed: "
                                 f"{done.stderr.strip()}; check the [remote] values")

    def qdiscs(self) -> list[str]:
        """The root qdisc of each end as tc shows it (for the run's header and the tests)."""
        out = [_tc("qdisc", "show", "dev", self.host_dev).stdout.strip()]
        out.append(subprocess.run(["ip", "netns", "exec", self.netns, "tc", "qdisc", "show", "dev", self.ns_dev],
                                  capture_output=True, text=True).stdout.strip())
        return out

    def remove(self) -> None:
        """Delete the namespace (its veth end and qdisc go with it) and this side's end;
        idempotent."""
        if not self.created:
            return
        self.created = False
        atexit.unregister(self.remove)
        _ip("netns", "del", self.netns, check=False)
        _ip("link", "del", self.host_dev, check=False)

    def __enter__(self) -> ShapedLink:
        return self.create()

    def __exit__(self, *exc) -> None:
        self.remove()


def alive(pid: int) -> bool:
    """A process of this pid exists (another user's too)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_dead() -> list[str]:
    """The namespaces and links of runs whose process is gone (a SIGKILL or the OOM killer leaves
    them: no exit handler ran), removed; what was removed. A live run's are never touched."""
    removed = []
    for name in _ip("netns", "list", check=False).stdout.split():
        pid = name[len(PREFIX):]
        if name.startswith(PREFIX) and pid.isdigit() and not alive(int(pid)):
            _ip("netns", "del", name, check=False)
            removed.append(f"namespace {name}")
    for name, pid in _project_links():
        if not alive(int(pid)):
            _ip("link", "del", name, check=False)
            removed.append(f"link {name}")
    return removed


def _project_links() -> list[tuple[str, str]]:
    """(name, pid) of every link named like the project's veth ends (dlb<pid>h, dlb<pid>n)."""
    out = []
    for line in _ip("-o", "link", "show", check=False).stdout.splitlines():
        name = line.split(":")[1].strip().split("@")[0] if ":" in line else ""
        if name.startswith(LINK_PREFIX) and name[len(LINK_PREFIX):-1].isdigit():
            out.append((name, name[len(LINK_PREFIX):-1]))
    return out


def leftovers(pid: int | None = None) -> list[str]:
    """The project's namespaces, links and shaping qdiscs still present (of one pid, or of any)."""
    tag = "" if pid is None else str(pid)
    out = [f"namespace {n}" for n in _ip("netns", "list", check=False).stdout.split()
           if n.startswith(PREFIX + tag) and (pid is None or n == f"{PREFIX}{pid}")]
    out += [f"link {name}" for name, owner in _project_links() if pid is None or owner == tag]
    lo = _tc("qdisc", "show", "dev", "lo").stdout
    if "netem" in lo or "tbf" in lo:
        out.append(f"qdisc on lo: {lo.strip()}")
    return out
