"""Pausing a process (SIGSTOP) at a moment it holds no ``file://`` lock.

On ``file://``, compare-and-swap writes take an ``flock`` on one of the store's lock
stripes for the length of the write. A process stopped inside that window keeps the lock
until it continues, and every other process's locked write on that stripe waits for it
(a documented limit of the backend: flock cannot be taken from a stopped holder). Tests
about what a pause past the lease does must not stop the process inside that window by
chance, or the others cannot even declare it lost; :func:`pause_outside_locks` stops it,
and if ``/proc/locks`` shows it holding a lock, lets it run on and stops it again.
"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

#: How long to wait for a stopped state or a retry before giving up, in seconds.
DEADLINE = 30.0


def _state(pid: int) -> str:
    """The one-letter scheduler state of ``pid`` (``T`` when stopped)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2]


def stopped(pid: int) -> bool:
    """Whether ``pid`` is stopped (SIGSTOP) now."""
    return _state(pid) == "T"


def holds_a_lock(pid: int) -> bool:
    """Whether ``/proc/locks`` lists a lock (not a wait for one) held by ``pid``."""
    try:
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return False
    for line in lines:
        fields = line.split()
        if len(fields) > 4 and fields[1] != "->" and fields[4] == str(pid):
            return True
    return False


def pause_outside_locks(pid: int, attempts: int = 200) -> None:
    """SIGSTOP ``pid`` at a moment it holds no lock; raises if that never happens."""
    tick = threading.Event()  # never set: wait(t) is a bounded poll
    for _ in range(attempts):
        os.kill(pid, signal.SIGSTOP)
        for _ in range(int(DEADLINE / 0.005)):
            if _state(pid) == "T":
                break
            tick.wait(0.005)
        else:
            raise AssertionError(f"process {pid} did not stop within {DEADLINE:g} s")
        if not holds_a_lock(pid):
            return
        os.kill(pid, signal.SIGCONT)
        tick.wait(0.001)  # let it leave the locked write before stopping it again
    raise AssertionError(f"process {pid} held a file lock each of {attempts} times it stopped")
