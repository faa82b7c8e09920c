"""Outside load: the CPU that processes outside the run used on this host during a visit, and steal time.

The host's busy CPU comes from /proc/stat (user, nice, system, irq, softirq; guest time is inside user), the
run's own from /proc/<pid>/stat of every process descending from the run's root process (the launcher: its
ranks and their DataLoader workers), utime + stime + cutime + cstime, so a worker that exited and was reaped
inside the tree still counts. Outside load = host busy - the run's CPU, as a percentage of the host's CPU
capacity over the visit (all cores); steal = time the hypervisor gave this machine's vCPUs to another guest.

A visit whose outside load passes OUTSIDE_LOAD_PCT is flagged: its figures may be another process's effect.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from harness.measure.telemetry import stat_fields

OUTSIDE_LOAD_PCT = 10.0  # a visit above this share of the host's CPU used by other processes is flagged
PROC = Path("/proc")


@dataclass(frozen=True)
class HostTicks:
    busy: int  # user + nice + system + irq + softirq, all CPUs, in clock ticks
    steal: int
    total: int  # every field but guest (counted in user already): the host's capacity over the same time


def host_ticks(stat: str | None = None) -> HostTicks | None:
    """The aggregate "cpu" line of /proc/stat; None where there is none (not Linux)."""
    try:
        text = stat if stat is not None else (PROC / "stat").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("cpu "):
            v = [int(x) for x in line.split()[1:]] + [0] * 10
            user, nice, system, idle, iowait, irq, softirq, steal = v[:8]
            return HostTicks(user + nice + system + irq + softirq, steal,
                             user + nice + system + idle + iowait + irq + softirq + steal)
    return None


def _stat_fields(pid: int) -> tuple[int, int] | None:
    """(ppid, utime + stime + cutime + cstime) of a process, or None if it is gone."""
    rest = stat_fields(PROC / str(pid) / "stat")
    if rest is None:
        return None
    return int(rest[1]), sum(int(x) for x in rest[11:15])


def tree_ticks(root: int) -> int:
    """CPU clock ticks of `root` and every live descendant (reaped ones are in their parent's cutime)."""
    children: dict[int, list[int]] = {}
    ticks: dict[int, int] = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            fields = _stat_fields(int(entry.name))
            if fields is not None:
                children.setdefault(fields[0], []).append(int(entry.name))
                ticks[int(entry.name)] = fields[1]
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += ticks.get(pid, 0)
        todo += children.get(pid, [])
    return total


def outside_load(host0: HostTicks, host1: HostTicks, run0: int, run1: int) -> tuple[float, float]:
    """(outside load %, steal %) of the host's CPU capacity between two readings; pure."""
    capacity = host1.total - host0.total
    if capacity <= 0:
        return 0.0, 0.0
    other = (host1.busy - host0.busy) - (run1 - run0)
    return max(0.0, 100.0 * other / capacity), max(0.0, 100.0 * (host1.steal - host0.steal) / capacity)


class HostLoad:
    """start() before a visit, stop() after it: (outside load %, steal %), or (None, None) off Linux."""

    def __init__(self, root: int | None = None):
        self.root = os.getppid() if root is None else root
        self._start: tuple[HostTicks | None, int] | None = None

    def start(self) -> None:
        self._start = (host_ticks(), tree_ticks(self.root))

    def stop(self) -> tuple[float | None, float | None]:
        if self._start is None or self._start[0] is None:
            return None, None
        end = host_ticks()
        if end is None:
            return None, None
        other, steal = outside_load(self._start[0], end, self._start[1], tree_ticks(self.root))
        return round(other, 2), round(steal, 2)
