"""harness.measure.hostload: the host's CPU used outside the run, from /proc; the run's own work excluded."""
from __future__ import annotations

import os
import subprocess
import sys
import time

from harness.measure.hostload import HostLoad, HostTicks, host_ticks, outside_load, tree_ticks

STAT = "cpu  100 0 50 800 10 5 5 30 0 0\ncpu0 50 0 25 400 5 2 3 15 0 0\n"


def test_proc_stat_fields_and_the_pure_arithmetic():
    t = host_ticks(STAT)
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
