"""The one background recorder: records written one at a time, in hand-over order.

Both patterns record progress off the training thread: ``shared_queue`` a unit's
completion, the pipeline an item's delivery. :class:`InOrderRecorder` is the thread and
the queue they share; each pattern supplies what one write does, and keeps its own
errors.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

from gradientmail.patterns._workers import Worker

__all__ = ["InOrderRecorder"]

T = TypeVar("T")


class InOrderRecorder(Generic[T]):
    """A thread that calls ``write(entry)`` for each entry handed over, in order.

    Guarantees: one write at a time, in hand-over order, each entry once; an entry counts
    as pending until its write has returned; :meth:`flush` returns once nothing is
    pending (or the thread ended); :meth:`stop` writes what is pending, then ends the
    thread. ``write`` keeps its own errors: one it raises ends the thread.

    Args:
        name: the thread's name.
        write: writes one entry.
    """

    def __init__(self, name: str, write: Callable[[T], None]) -> None:
        self._write = write
        self._pending: deque[T] = deque()
        self._changed = threading.Condition()
        self._thread = Worker(name, self._run)

    def start(self) -> InOrderRecorder[T]:
        """Start the thread (once)."""
        self._thread.start()
        return self

    @property
    def pending(self) -> int:
        """Entries handed over whose write has not returned yet (a snapshot: reading a
        deque's length is atomic, so the pipeline's per-item check takes no lock)."""
        return len(self._pending)

    def hand_over(self, entry: T) -> None:
        """Queue ``entry`` for writing after every entry handed over before it."""
        with self._changed:
            self._pending.append(entry)
            self._changed.notify_all()

    def flush(self) -> None:
        """Wait until every entry handed over is written (or the thread ended)."""
        with self._changed:
            while self._pending and self._thread.is_alive():
                self._changed.wait()

    def stop(self) -> None:
        """Write what is pending, then end the thread."""
        self.flush()
        # The stop event first, then the wake-up: woken before the event was set, the thread
        # would wait again, and the join below would never return.
        self._thread.stop(wait=False)
        with self._changed:
            self._changed.notify_all()
        self._thread.stop()

    def _run(self, stop: threading.Event) -> None:
        while True:
            with self._changed:
                while not self._pending and not stop.is_set():
                    self._changed.wait()
                if not self._pending:
                    return
                entry = self._pending[0]
            try:
                self._write(entry)
            finally:
                with self._changed:
                    self._pending.popleft()
                    self._changed.notify_all()
