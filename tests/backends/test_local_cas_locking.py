"""file:// compare-and-swap and put hold the key's lock across processes; delete takes none.

A file:// swap reads the key's version and then renames the new value into place; the
key's lock stripe (a process-local lock plus an ``flock`` on ``.locks/NN``) keeps other
swaps and puts out of that window. The process-local lock alone would pass every thread
test, so each test here involves another process: one holds the key's lock and the swap
must wait for it; two processes increment one counter and no increment may be lost.
Threads on separate handles are checked too. A delete takes no lock (a process stopped
inside one would hold up every other write of its stripe): it completes while another
process holds the key's lock (how it still never lands inside a swap is pinned by
``test_local_deletes.py``).

That a write waits is shown without watching it for a while: Linux lists in ``/proc/locks``
every ``flock`` a process is blocked on (a line marked ``->``, naming the locked file's
device and inode). Once the writer is listed there it cannot finish until the holder lets
go; a writer that skips the ``flock`` is never listed and finishes at once.
"""

from __future__ import annotations

import multiprocessing as mp
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gradientmail import from_url
from gradientmail._errors import KeyNotFoundError
from gradientmail.backends.local import FileMailbox
from gradientmail.conformance._races import cas_counter
from tests.support.rigs import Rig

pytestmark = pytest.mark.timeout(120)

KEY = "counters/c"
JOIN = 60.0
#: Seconds a condition that must come true is given (it takes milliseconds when correct).
BOUND = 30.0
#: Seconds between two looks at /proc/locks, which nothing notifies.
POLL = 0.005
PROC_LOCKS = Path("/proc/locks")


def _eventually(condition: Callable[[], bool], what: str) -> None:
    """Wait until ``condition()`` holds; fail after BOUND s."""
    deadline = time.monotonic() + BOUND
    while not condition():
        assert time.monotonic() < deadline, f"not within {BOUND} s: {what}"
        time.sleep(POLL)


def _inodes(directory: Path) -> set[int]:
    """The inode numbers of the files in ``directory``."""
    return {path.stat().st_ino for path in directory.iterdir()}


def _blocked_flock_inodes() -> set[int]:
    """The inodes of the files some process waits to ``flock`` now, from /proc/locks.

    A waiter's line reads ``N: -> FLOCK ADVISORY WRITE <pid> <maj>:<min>:<inode> 0 EOF``.
    Only the inode is compared: on overlay file systems the device /proc/locks names can
    differ from ``st_dev``, and the pid from ``os.getpid()`` in another pid namespace.
    """
    blocked = set()
    for line in PROC_LOCKS.read_text().splitlines():
        fields = line.split()
        if len(fields) >= 7 and fields[1] == "->" and fields[2] == "FLOCK":
            blocked.add(int(fields[6].rsplit(":", 1)[1]))
    return blocked


def hold_key_lock(url: str, key: str, locked: Any, release: Any, let_go: Any = None) -> None:
    """In another process: hold ``key``'s lock (as a writer of that key does) until told;
    then set ``let_go``, if given."""
    box = from_url(url)
    assert isinstance(box, FileMailbox)
    with box._dir.locked(key):
        locked.set()
        release.wait(JOIN)
    if let_go is not None:
        let_go.set()


def _swap(box: Any) -> None:
    _, version = box.get_versioned(KEY)
    assert box.put_if_match(KEY, b"swapped", version) is not None


WRITES = {
    "put_if_match": _swap,
    "put": lambda box: box.put(KEY, b"put"),
}
#: What the key holds once each write has run.
AFTER = {"put_if_match": b"swapped", "put": b"put"}


def _value(box: Any) -> bytes | None:
    try:
        return box.get(KEY)  # type: ignore[no-any-return]
    except KeyNotFoundError:
        return None


@pytest.mark.skipif(not PROC_LOCKS.exists(), reason="needs Linux's /proc/locks")
@pytest.mark.parametrize("write", list(WRITES))
def test_a_write_waits_while_another_process_holds_the_keys_lock(rig_file: Rig, write: str) -> None:
    url = rig_file.url()
    box = rig_file.open(url)
    assert isinstance(box, FileMailbox)
    box.put(KEY, b"before")
    ctx = mp.get_context("spawn")
    locked, release = ctx.Event(), ctx.Event()
    holder = ctx.Process(target=hold_key_lock, args=(url, KEY, locked, release))
    holder.start()
    done = threading.Event()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            WRITES[write](box)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)
        finally:
            done.set()

    writer = threading.Thread(target=run, name=f"writer-{write}")
    try:
        assert locked.wait(JOIN), "the other process never took the lock"
        # The lock stripes of this fresh mailbox, which only this test's writers flock: a
        # waiter on one of them is our writer (the holder has its lock, it does not wait).
        stripes = _inodes(Path(box.root) / ".locks")
        writer.start()
        _eventually(
            lambda: done.is_set() or bool(_blocked_flock_inodes() & stripes),
            f"{write} blocked on a lock stripe's flock",
        )
        assert not done.is_set(), f"{write} ran while another process held the key's lock"
        assert _value(box) == b"before"
    finally:
        release.set()
        holder.join(JOIN)
    writer.join(JOIN)
    assert done.is_set()
    assert errors == []
    assert holder.exitcode == 0
    assert _value(box) == AFTER[write]


def test_a_delete_completes_while_another_process_holds_the_keys_lock(rig_file: Rig) -> None:
    url = rig_file.url()
    box = rig_file.open(url)
    box.put(KEY, b"before")
    ctx = mp.get_context("spawn")
    locked, release, let_go = ctx.Event(), ctx.Event(), ctx.Event()
    holder = ctx.Process(target=hold_key_lock, args=(url, KEY, locked, release, let_go))
    holder.start()
    try:
        assert locked.wait(JOIN), "the other process never took the lock"
        box.delete(KEY)  # a delete that waited for the lock returns only once it let go
        assert not let_go.is_set(), "the delete waited for the other process's lock"
        assert _value(box) is None
    finally:
        release.set()
        holder.join(JOIN)
    assert holder.exitcode == 0


def test_cas_counters_in_two_processes_lose_no_increment(rig_file: Rig) -> None:
    report = cas_counter(rig_file.fresh(), workers=2, increments=100, mode="processes")
    assert report.ok, report.counterexample()
    assert report.final == 200


def test_cas_counters_in_threads_on_separate_handles_lose_no_increment(rig_file: Rig) -> None:
    report = cas_counter(rig_file.fresh(), workers=4, increments=50, mode="threads")
    assert report.ok, report.counterexample()
    assert report.final == 200
