"""harness.measure.hostload: the host's CPU used outside the run, from /proc; the run's own work excluded."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.measure.hostload import HostLoad, HostTicks, host_ticks, outside_load, tree_ticks

STAT = "cpu  100 0 50 800 10 5 5 30 0 0\ncpu0 50 0 25 400 5 2 3 15 0 0\n"


def test_proc_stat_fields_and_the_pure_arithmetic():
    assert host_ticks(STAT, cpus={0}) == HostTicks(busy=80, steal=15, total=500)  # cpu0's line
    t = host_ticks(STAT, cpus={7})  # no line of the run's CPUs: the aggregate line
    assert t == HostTicks(busy=160, steal=30, total=1000)
    later = HostTicks(busy=160 + 300, steal=30 + 20, total=1000 + 1000)
    other, steal = outside_load(t, later, run0=0, run1=100)  # 300 busy, 100 of them the run's
    assert (other, steal) == (20.0, 2.0)
    assert outside_load(t, t, 0, 0) == (0.0, 0.0)
    assert outside_load(t, later, 0, 500)[0] == 0.0  # never negative (tick rounding)


def burn(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_the_runs_own_cpu_is_counted_in_its_tree():
    before, own = tree_ticks(os.getpid()), os.times()
    burn(0.5)
    after, now = tree_ticks(os.getpid()), os.times()
    ticks = os.sysconf("SC_CLK_TCK")
    spent = (now.user + now.system - own.user - own.system) * ticks
    assert abs((after - before) - spent) <= 0.2 * spent + 2


@pytest.mark.slow  # spawns a busy process
def test_a_busy_process_outside_the_tree_is_outside_load():
    load = HostLoad(root=os.getpid())
    load.start()
    # a busy loop that is not our descendant: started by a shell that exits at once (orphaned)
    code = "import time\nend = time.time() + 1.0\nwhile time.time() < end: pass\n"
    subprocess.run(["sh", "-c", f"'{sys.executable}' -c '{code}' >/dev/null 2>&1 &"], check=True)
    time.sleep(1.2)
    other, steal = load.stop()
    cores = os.cpu_count() or 1
    assert other >= 0.5 * 100 / cores  # one core busy for most of the window
    assert steal >= 0


@pytest.mark.slow  # spawns a child process
def test_a_live_descendants_cpu_is_the_runs():
    """The walk over descendants: a child busy while the parent sleeps counts in the parent's tree (without
    the walk only the root's own ticks, about nothing here, would count)."""
    code = ("import time\nprint('up', flush=True)\nend = time.process_time() + 0.8\n"
            "while time.process_time() < end: pass\nprint('burnt', flush=True)\ntime.sleep(30)\n")
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "up"
        before = tree_ticks(os.getpid())
        assert child.stdout.readline().strip() == "burnt"  # 0.8 s of CPU, and alive (not yet in our cutime)
        gained = tree_ticks(os.getpid()) - before
    finally:
        child.kill()
        child.wait()
    assert gained >= 0.5 * os.sysconf("SC_CLK_TCK"), gained


def test_the_busy_cpu_is_the_runs_own_cpus_only():
    stat = ("cpu  300 0 0 700 0 0 0 0 0 0\ncpu0 200 0 0 300 0 0 0 0 0 0\ncpu1 100 0 0 400 0 0 0 0 0 0\n")
    assert host_ticks(stat, cpus={1}) == HostTicks(busy=100, steal=0, total=500)  # cpu0's load is not ours
    assert host_ticks(stat, cpus={0, 1}) == HostTicks(busy=300, steal=0, total=1000)
    assert host_ticks("cpu  300 0 0 700 0 0 0 0 0 0\n", cpus={0}) == HostTicks(300, 0, 1000)  # no per-CPU lines


def allowance_in(*prefix: str) -> float:
    code = "from harness.measure.hostload import cpu_allowance; print(cpu_allowance())"
    out = subprocess.run([*prefix, sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parent.parent)
    return float(out.stdout)


def test_the_allowance_is_the_affinity_under_taskset():
    if shutil.which("taskset") is None:
        pytest.skip("taskset (util-linux) is not installed")
    assert allowance_in("taskset", "-c", "0") == 1.0
    assert allowance_in() == float(len(os.sched_getaffinity(0)))


def test_the_allowance_is_capped_by_a_cgroup_cpu_quota():
    """A real cgroup (v1 cpu controller, or v2 cpu.max) with a quota of half a CPU: the process in it is told
    0.5, whatever the host's count."""
    group = None
    for base, files in ((Path("/sys/fs/cgroup/cpu"), {"cpu.cfs_quota_us": "50000"}),
                        (Path("/sys/fs/cgroup"), {"cpu.max": "50000 100000"})):
        try:
            candidate = base / f"dlbench-test-{os.getpid()}"
            candidate.mkdir()
        except OSError:
            continue
        try:
            for name, value in files.items():
                (candidate / name).write_text(value)
            group = candidate
            break
        except OSError:
            candidate.rmdir()
    if group is None:
        pytest.skip("no writable cgroup with a cpu controller here (needs root)")
    try:
        assert allowance_in("sh", "-c", f'echo $$ > {group}/cgroup.procs && exec "$0" "$@"') == 0.5
    finally:
        for _ in range(50):
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.1)
