"""A ``shared_queue`` buffer that lets a test see its consumer wait, without timing anything.

:class:`WatchedBuffer` is the queue's own :class:`HandoffBuffer`, recorded, not altered: it
counts the consumers blocked on it right now (as ``waiting_for_room`` counts blocked
producers): in :meth:`HandoffBuffer.get`, or, as a ``shared_queue`` consumer waits, on the
queue's bell (:class:`WatchedBell`) while this buffer is empty. Every change it makes is
announced on :attr:`WatchedBuffer.changed`, a condition on the buffer's own lock. So a test
can wait, by events, until

* the consumer is blocked on an empty buffer (:meth:`WatchedBuffer.consumer_blocked`): it
  stays blocked until the next entry is put, so whatever the loader does from then until
  its next put lies inside the consumer's wait; or
* the next item is already buffered (:meth:`WatchedBuffer.next_item_ready`): the
  consumer's next ``next()`` then finds every entry it takes waiting for it, and waits
  for nothing.

Install it with :func:`install` ``(monkeypatch, into)``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from gradientmail.patterns._workers import Bell, HandoffBuffer
from gradientmail.patterns.shared_queue import _consumer, _epoch
from gradientmail.patterns.shared_queue._buffer_entries import Control, Exhausted, Failed, Fenced

#: Seconds after which a wait here is a hang.
HANG = 60.0


class _AnnouncedCondition(threading.Condition):
    """The buffer's not-empty condition: counts blocked consumers, announces every change."""

    def __init__(self, owner: WatchedBuffer) -> None:
        super().__init__(owner._lock)
        self._owner = owner

    def wait(self, timeout: float | None = None) -> bool:
        owner = self._owner
        owner.blocked += 1
        owner.waits += 1
        owner.changed.notify_all()
        try:
            return super().wait(timeout)
        finally:
            owner.blocked -= 1

    def notify(self, n: int = 1) -> None:
        super().notify(n)
        self._owner.changed.notify_all()


class WatchedBell(Bell):
    """The queue's bell: while its consumer blocks on it, its buffers count a blocked
    consumer (announced under the bell's lock, so no ring slips in between)."""

    def __init__(self) -> None:
        super().__init__()
        self.buffers: list[WatchedBuffer] = []

    def wait(self, seen: int) -> float:
        with self._changed:
            if self._rings != seen:
                return 0.0
            start = time.perf_counter()
            for buffer in self.buffers:
                buffer.announce_blocked(+1)
            try:
                while self._rings == seen:
                    self._changed.wait()
            finally:
                for buffer in self.buffers:
                    buffer.announce_blocked(-1)
            return time.perf_counter() - start


class WatchedBuffer(HandoffBuffer[Any]):
    def __init__(self, capacity: int, bell: Bell | None = None) -> None:
        super().__init__(capacity, bell)
        if isinstance(bell, WatchedBell):
            bell.buffers.append(self)
        #: consumers blocked in get() on an empty buffer now; waits they began in all.
        self.blocked = 0
        self.waits = 0
        #: notified (under the buffer's lock) when an entry is put and when a wait begins.
        self.changed = threading.Condition(self._lock)
        self._not_empty = _AnnouncedCondition(self)

    def announce_blocked(self, change: int) -> None:
        """A consumer starts (+1) or stops (-1) waiting on the bell this buffer rings."""
        with self._lock:
            self.blocked += change
            if change > 0:
                self.waits += 1
                self.changed.notify_all()

    def consumer_blocked(self, timeout: float = HANG) -> float:
        """Wait until the consumer is blocked on the empty buffer; the clock then.

        The consumer's wait began before the returned ``perf_counter`` reading and lasts at
        least until the next entry is put.
        """
        with self._lock:
            if not self.changed.wait_for(lambda: self.blocked > 0 and not self._entries, timeout):
                raise AssertionError(f"the consumer did not wait within {timeout:g} s (a hang)")
            return time.perf_counter()

    def next_item_ready(self, timeout: float = HANG) -> None:
        """Wait until an item, or the end of the queue, is buffered.

        Entries are taken in order, so the consumer's next ``next()`` finds it and every
        entry before it already there.
        """

        def ready() -> bool:
            return any(
                not isinstance(entry, Control) or isinstance(entry, (Exhausted, Failed, Fenced))
                for entry, _ in self._entries
            )

        with self._lock:
            if not self.changed.wait_for(ready, timeout):
                raise AssertionError(f"no item was buffered within {timeout:g} s (a hang)")


def watched(into: list[WatchedBuffer]) -> Callable[..., WatchedBuffer]:
    """A stand-in for the ``HandoffBuffer`` class that keeps each buffer it makes."""

    def make(capacity: int, bell: Bell | None = None) -> WatchedBuffer:
        into.append(WatchedBuffer(capacity, bell))
        return into[-1]

    return make


def install(monkeypatch: pytest.MonkeyPatch, into: list[WatchedBuffer]) -> None:
    """Make every ``shared_queue`` opened from now on use watched buffers and bells."""
    monkeypatch.setattr(_epoch, "HandoffBuffer", watched(into))
    monkeypatch.setattr(_consumer, "Bell", WatchedBell)
