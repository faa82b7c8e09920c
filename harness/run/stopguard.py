"""A torchrun rank told to stop (SIGTERM from Slurm's scancel, from torchrun passing it on, or
SIGINT) has until the scheduler's KillWait (Slurm: 30 s by default) before SIGKILL. The rank
unwinds (its loader thread, DataLoader workers, process group) and then runs its ending: rank 0
writes the report over the cells written so far and prints how to resume.

The guard makes that ending certain. Its thread learns of the signal from the interpreter's wakeup
fd, which the C-level handler writes to even while the main thread is held in a C++ call (a
collective waiting for a peer), where no Python signal handler can run. If the process is still
there GRACE_S after the signal, the thread prints where each thread was, runs the ending itself
(unless the main thread already began it: then it waits for it a while longer) and exits 128 + the
signal's number. Whichever comes first runs the ending, once."""
from __future__ import annotations

import faulthandler
import os
import signal
import sys
import threading
from collections.abc import Callable

GRACE_S = 10.0  # the unwinding took 0.8-6.3 s on 2 cores (the DataLoader notices killed workers every 5 s); leaves
# 5 s of the check's KillWait=15 (Slurm's default: 30) for the ending
STOPS = (signal.SIGTERM, signal.SIGINT)


class StopGuard:
    """`ending(code)`: what a rank does once it has been told to stop (code 143 or 130). Install it
    in the main thread, after the SIGTERM handler (the wakeup fd reports only signals with a Python
    handler)."""

    def __init__(self, ending: Callable[[int], None], grace_s: float = GRACE_S):
        self._ending = ending
        self.grace_s = grace_s
        self._lock = threading.Lock()
        self._began = False
        self._ended = threading.Event()
        read, write = os.pipe()
        os.set_blocking(write, False)
        signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        threading.Thread(target=self._watch, args=(read,), name="stop-guard", daemon=True).start()

    def end(self, code: int) -> bool:
        """Run the ending, or, if the other thread began it, wait a while for it to finish; True if
        this call ran it."""
        with self._lock:
            began, self._began = self._began, True
        if began:
            self._ended.wait(self.grace_s)
            return False
        try:
            self._ending(code)
        finally:
            self._ended.set()
        return True

    def _watch(self, fd: int) -> None:
        signum = 0
        while not signum:
            data = os.read(fd, 64)  # one byte per signal caught (SIGCHLD from the DataLoader's workers too)
            signum = next((b for b in data if b in STOPS), 0)
        if self._ended.wait(self.grace_s):
            return  # the main thread ended in time; it exits by itself
        name = signal.Signals(signum).name
        print(f"run_bench.py: rank {os.environ.get('RANK', '0')} still unwinding {self.grace_s:.0f} s after "
              f"{name}; where its threads were:", file=sys.stderr, flush=True)
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        try:
            self.end(128 + signum)
        except Exception as err:  # noqa: BLE001 - the exit below must happen
            print(f"run_bench.py: the ending after {name} failed: {type(err).__name__}: {err}", file=sys.stderr)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(128 + signum)
