"""file:// compare-and-swap, put and delete hold the key's lock across processes.

A file:// swap reads the key's version and then renames the new value into place; only the
key's lock stripe (a process-local lock plus an ``flock`` on ``.locks/NN``) makes the two
steps one. The process-local lock alone would pass every thread test, so each test here
involves another process: one holds the key's lock and the swap must wait for it; two
processes increment one counter and no increment may be lost. Threads on separate handles
are checked too.
"""

from __future__ import annotations

import multiprocessing as mp
import threading
from typing import Any

import pytest

from gradientmail import from_url
from gradientmail.backends.local import FileMailbox
from gradientmail.conformance.races import cas_counter
from tests.support.rigs import Rig

pytestmark = pytest.mark.timeout(120)

KEY = "counters/c"
JOIN = 60.0
#: How long a blocked writer is watched to see that it waits. Waiting is all a correct
#: writer can do here, so a longer watch cannot fail it; a writer that skips the lock
#: finishes in milliseconds.
WATCH = 0.5


def hold_key_lock(url: str, key: str, locked: Any, release: Any) -> None:
    """In another process: hold ``key``'s lock (as a writer of that key does) until told."""
    box = from_url(url)
    assert isinstance(box, FileMailbox)
    with box._locked(key):
        locked.set()
        release.wait(JOIN)


def _swap(box: Any) -> None:
    _, version = box.get_versioned(KEY)
    assert box.put_if_match(KEY, b"swapped", version) is not None


WRITES = {
    "put_if_match": _swap,
    "put": lambda box: box.put(KEY, b"put"),
    "delete": lambda box: box.delete(KEY),
}


@pytest.mark.parametrize("write", list(WRITES))
def test_a_write_waits_while_another_process_holds_the_keys_lock(rig_file: Rig, write: str) -> None:
    url = rig_file.url()
    box = rig_file.open(url)
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
        writer.start()
        assert not done.wait(WATCH), f"{write} ran while another process held the key's lock"
    finally:
        release.set()
        holder.join(JOIN)
    writer.join(JOIN)
    assert done.is_set()
    assert errors == []
    assert holder.exitcode == 0


def test_cas_counters_in_two_processes_lose_no_increment(rig_file: Rig) -> None:
    report = cas_counter(rig_file.fresh(), workers=2, increments=100, mode="processes")
    assert report.ok, report.counterexample()
    assert report.final == 200


def test_cas_counters_in_threads_on_separate_handles_lose_no_increment(rig_file: Rig) -> None:
    report = cas_counter(rig_file.fresh(), workers=4, increments=50, mode="threads")
    assert report.ok, report.counterexample()
    assert report.final == 200
