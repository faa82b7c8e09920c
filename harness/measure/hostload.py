"""Outside load: the CPU that processes outside the run used on the run's own CPUs during a visit,
and steal time; and the run's CPU allowance (its affinity and its cgroup's quota), the cores it
really has.

The busy CPU comes from /proc/stat's per-CPU lines of the CPUs the run may use (sched_getaffinity:
under a Slurm cpuset or `taskset`, other jobs on other cores are not the run's concern; user, nice,
system, irq, softirq; guest time is inside user), the run's own from /proc/<pid>/stat of every
process descending from the run's root process (the launcher: its ranks and their DataLoader
workers), utime + stime + cutime + cstime, so a worker that exited and was reaped inside the tree
still counts. Outside load = busy - the run's CPU, as a percentage of those CPUs' capacity over the
visit; steal = time the hypervisor gave these vCPUs to another guest.

A visit whose outside load passes OUTSIDE_LOAD_PCT is flagged: its figures may be another process's
effect.
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


def host_ticks(stat: str | None = None, cpus: set[int] | None = None) -> HostTicks | None:
    """The "cpuN" lines of /proc/stat summed over `cpus` (default: the CPUs this process may run
    on); the aggregate "cpu" line where no per-CPU line matches. None where there is no /proc/stat
    (not Linux)."""
    try:
        text = stat if stat is not None else (PROC / "stat").read_text()
    except OSError:
        return None
    if cpus is None and hasattr(os, "sched_getaffinity"):
        cpus = set(os.sched_getaffinity(0))
    total, per_cpu = None, []
    for line in text.splitlines():
        name = line.split(" ", 1)[0]
        if name == "cpu":
            total = _ticks(line)
        elif name.startswith("cpu") and name[3:].isdigit() and (cpus is None or int(name[3:]) in cpus):
            per_cpu.append(_ticks(line))
    if not per_cpu:
        return total
    return HostTicks(*(sum(getattr(t, f) for t in per_cpu) for f in ("busy", "steal", "total")))


def _ticks(line: str) -> HostTicks:
    v = [int(x) for x in line.split()[1:]] + [0] * 10
    user, nice, system, idle, iowait, irq, softirq, steal = v[:8]
    return HostTicks(user + nice + system + irq + softirq, steal,
                     user + nice + system + idle + iowait + irq + softirq + steal)


def cpu_allowance(pid: int | str = "self", cgroup_root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """The CPUs a process may use: its affinity, capped by its cgroup's CPU quota (cgroup v2
    cpu.max, or v1 cpu.cfs_quota_us / cpu.cfs_period_us), e.g. 8 on a 128-core host whose container
    has a quota of 8 CPUs."""
    try:
        cores = float(len(os.sched_getaffinity(0 if pid == "self" else int(pid))))
    except (AttributeError, OSError):
        cores = float(os.cpu_count() or 0) or None
    quota = cgroup_quota(pid, cgroup_root)
    if quota is None:
        return cores
    return quota if cores is None else min(cores, quota)


def cgroup_quota(pid: int | str = "self", cgroup_root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """CPUs' worth of quota of the process's cgroup and its ancestors (the tightest), None without
    one."""
    try:
        lines = (PROC / str(pid) / "cgroup").read_text().splitlines()
    except OSError:
        return None
    quotas = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":  # v2: cpu.max = "QUOTA PERIOD" or "max PERIOD"
            base, names = cgroup_root / ("unified" if (cgroup_root / "unified").is_dir() else ""), ("cpu.max",)
        elif "cpu" in controllers.split(","):
            base, names = cgroup_root / ("cpu,cpuacct" if (cgroup_root / "cpu,cpuacct").is_dir() else "cpu"), \
                ("cpu.cfs_quota_us", "cpu.cfs_period_us")
        else:
            continue
        here = base / path.lstrip("/")
        while True:
            quotas.append(_quota(here, names))
            if here == base or base not in here.parents:
                break
            here = here.parent
    known = [q for q in quotas if q is not None]
    return min(known) if known else None


def _quota(directory: Path, names: tuple[str, ...]) -> float | None:
    try:
        if len(names) == 1:
            quota, period = (directory / names[0]).read_text().split()
        else:
            quota, period = ((directory / n).read_text().strip() for n in names)
    except (OSError, ValueError):
        return None
    if quota in ("max", "-1") or int(period) <= 0:
        return None
    return int(quota) / int(period)


def _stat_fields(pid: int) -> tuple[int, int] | None:
    """(ppid, utime + stime + cutime + cstime) of a process, or None if it is gone."""
    rest = stat_fields(PROC / str(pid) / "stat")
    if rest is None:
        return None
    return int(rest[1]), sum(int(x) for x in rest[11:15])


def tree_ticks(root: int) -> int:
    """CPU clock ticks of `root` and every live descendant (reaped ones are in their parent's
    cutime)."""
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
    """start() before a visit, stop() after it: (outside load %, steal %), or (None, None) off
    Linux."""

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
