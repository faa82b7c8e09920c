"""Death with the parent: a process the run starts must not outlive it, even when the launcher is
killed with SIGKILL (which runs no handler). The kernel's PR_SET_PDEATHSIG does it for a process
whose parent thread lives as long as the parent: the spawned ranks
(harness.run.supervisor.detach_rank), the DataLoader workers forked by a rank's forkserver,
check-resume's restart process. A rank's forkserver is started from whichever thread first iterates
a DataLoader (on an emulated rank the receive-ahead thread, which ends with each epoch), so it
watches its parent's pid instead (harness.run.forkserverinit).
"""
from __future__ import annotations

import ctypes
import os
import signal
import threading
import time

PR_SET_PDEATHSIG = 1
WATCH_S = 0.2  # how often a watching process looks at its parent's pid


def die_with_parent(parent: int | None = None) -> None:
    """SIGKILL this process when its parent ends; where the parent has already ended (it died
    before the request was made), exit now: its pid is no longer `parent` (the pid that started
    this process), or, `parent` unknown, this process was handed to init (pid 1)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent if parent is not None else os.getppid() == 1:
        os._exit(1)


def forked_children_die_with_this_process() -> None:
    """Every process this one forks from now on gets PR_SET_PDEATHSIG right after the fork (the
    fork is made by this process's main thread: the forkserver's)."""
    forker = [os.getpid()]
    os.register_at_fork(before=lambda: forker.__setitem__(0, os.getpid()),
                        after_in_child=lambda: die_with_parent(forker[0]))


def exit_with_parent() -> None:
    """A daemon thread that exits this process once its parent's pid changes (the parent ended)."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(WATCH_S)
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()
