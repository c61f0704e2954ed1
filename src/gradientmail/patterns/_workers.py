"""Background workers: one thread lifecycle, one handoff buffer, one way errors cross.

* :class:`CarriedError`: an exception raised in a background thread travels through a
  pattern's buffer *after* the items produced before it, and the consumer re-raises it as a
  :class:`~gradientmail._errors.WorkerError` with the original chained (``__cause__``) and
  the worker's traceback as text (the idea of torch's ``ExceptionWrapper``). Its text fields
  survive a round trip through a record (:meth:`CarriedError.to_record` /
  :meth:`CarriedError.from_record`), for workers in other processes.
* :class:`HandoffBuffer`: a bounded FIFO between one background producer thread and a
  consumer, with control entries that do not count against the bound, and a ``close`` that
  wakes a producer waiting for room.
* :class:`Worker`: a named daemon thread with a stop event, started once and joined on
  stop, for every periodic or looping background task (heartbeats, publishers, loaders).
* :class:`Backoff`: the one polling backoff (doubling up to a ceiling, reset on progress).
* :class:`Bell`: rung by several buffers, for one consumer that waits on all of them.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from gradientmail._errors import WorkerError

__all__ = ["EMPTY", "Backoff", "Bell", "CarriedError", "HandoffBuffer", "Worker"]

T = TypeVar("T")


class CarriedError:
    """An exception captured in a worker thread, to be queued after the items before it.

    Create with :meth:`of` inside the ``except`` block (so the traceback is complete), queue
    it, and call :meth:`reraise` in the consumer's thread. The text fields survive being
    written to a mailbox as JSON, for patterns whose workers live in other processes.
    """

    __slots__ = ("message", "original", "traceback_text", "type_name")

    def __init__(
        self,
        type_name: str,
        message: str,
        traceback_text: str,
        original: BaseException | None = None,
    ) -> None:
        self.type_name = type_name
        self.message = message
        self.traceback_text = traceback_text
        self.original = original

    @classmethod
    def of(cls, exc: BaseException) -> CarriedError:
        """Capture ``exc`` with its traceback formatted now, in the worker's thread."""
        kind = type(exc)
        name = kind.__qualname__
        if kind.__module__ not in ("builtins", "__main__"):
            name = f"{kind.__module__}.{name}"
        text = "".join(traceback.format_exception(kind, exc, exc.__traceback__))
        return cls(name, str(exc), text, exc)

    def error(self, worker: str, context: str = "") -> WorkerError:
        """A :class:`WorkerError` for the consumer, with the original chained when present."""
        where = f" {context}" if context else ""
        described = f"{self.type_name}: {self.message}" if self.message else self.type_name
        error = WorkerError(
            f"{worker} failed{where}: {described}",
            worker=worker,
            error_type=self.type_name,
            worker_traceback=self.traceback_text,
        )
        error.__cause__ = self.original
        return error

    def reraise(self, worker: str = "a background worker", context: str = "") -> None:
        """Raise :meth:`error` (``WorkerError`` from the original) in the caller's thread."""
        raise self.error(worker, context)

    def to_record(self) -> dict[str, str]:
        """The error as JSON-friendly fields: ``type``, ``message`` and ``traceback``."""
        return {"type": self.type_name, "message": self.message, "traceback": self.traceback_text}

    @classmethod
    def from_record(cls, record: object) -> CarriedError:
        """Rebuild from :meth:`to_record`'s fields (missing or malformed fields read as empty)."""
        fields = record if isinstance(record, dict) else {}
        return cls(
            str(fields.get("type") or "unknown error"),
            str(fields.get("message") or ""),
            str(fields.get("traceback") or ""),
        )

    def __repr__(self) -> str:
        return f"<CarriedError {self.type_name}: {self.message[:60]!r}>"


class _CountedCondition(threading.Condition):
    """A condition variable that counts the threads blocked in :meth:`wait` right now.

    ``waiting`` changes only while the condition's lock is held (``wait`` is called with it
    held and returns with it held again), so it is read consistently under that lock.
    """

    def __init__(self, lock: threading.Lock) -> None:
        super().__init__(lock)
        self.waiting = 0

    def wait(self, timeout: float | None = None) -> bool:
        self.waiting += 1
        try:
            return super().wait(timeout)
        finally:
            self.waiting -= 1


class Bell:
    """A doorbell that producers ring, for one consumer waiting on several of them.

    Read :attr:`rings` *before* looking at what the producers made, then :meth:`wait` with
    it: a ring between the two is never missed, so the consumer neither sleeps past an
    entry nor spins.
    """

    __slots__ = ("_changed", "_rings")

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._rings = 0

    @property
    def rings(self) -> int:
        """How many times the bell has rung (read without the lock: an int read is atomic,
        and a stale count only makes :meth:`wait` return at once, to look again)."""
        return self._rings

    def ring(self) -> None:
        """Wake the consumer."""
        with self._changed:
            self._rings += 1
            self._changed.notify_all()

    def wait(self, seen: int) -> float:
        """Block until the bell has rung more than ``seen`` times; the seconds waited."""
        with self._changed:
            if self._rings != seen:
                return 0.0
            start = time.perf_counter()
            while self._rings == seen:
                self._changed.wait()
            return time.perf_counter() - start


#: What :meth:`HandoffBuffer.get` returns, with ``block=False``, from an empty buffer.
EMPTY = object()


class HandoffBuffer(Generic[T]):
    """A bounded FIFO from one producer thread to one consumer, that can be closed.

    * :meth:`put` waits while ``capacity`` counted entries are buffered; it returns ``False``
      (dropping the entry) once :meth:`close` has been called, and never blocks after that.
    * :meth:`wait_for_room` waits until a put would not block, so a producer can avoid even
      *making* the next entry while the buffer is full.
    * :meth:`put_control` appends an entry that does not count against ``capacity`` (an end
      marker, a carried error), so it never waits behind the bound.
    * :meth:`get` returns entries in the order they were put; it blocks while the buffer is
      empty and returns ``(entry, seconds_waited)``; with ``block=False`` it returns
      ``(EMPTY, 0.0)`` instead of blocking.
    * ``bell``: rung by every entry put and by :meth:`close`, for a consumer of several
      buffers.
    * :attr:`waiting_for_room` counts the producers blocked for want of room right now, so a
      caller (a test, a monitor) can tell that the producer has reached the bound and stopped.
    """

    __slots__ = (
        "_bell",
        "_closed",
        "_counted",
        "_entries",
        "_lock",
        "_not_empty",
        "_not_full",
        "capacity",
    )

    def __init__(self, capacity: int, bell: Bell | None = None) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, not {capacity}")
        self.capacity = capacity
        self._bell = bell
        self._entries: deque[tuple[T | object, bool]] = deque()
        self._counted = 0
        self._closed = False
        self._lock = threading.Lock()
        self._not_empty = threading.Condition(self._lock)
        self._not_full = _CountedCondition(self._lock)

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def __len__(self) -> int:
        """Counted entries buffered now."""
        return self._counted

    @property
    def waiting_for_room(self) -> int:
        """Threads blocked now in :meth:`put` or :meth:`wait_for_room` because the buffer is full.

        Non-zero means the producer has stopped at the bound: it makes no further entry until
        :meth:`get` takes a counted one (or :meth:`close` is called).
        """
        with self._lock:
            return self._not_full.waiting

    def wait_for_room(self) -> bool:
        """Block until a counted entry fits; ``False`` if the buffer is (or gets) closed."""
        with self._lock:
            while self._counted >= self.capacity and not self._closed:
                self._not_full.wait()
            return not self._closed

    def put(self, entry: T) -> bool:
        """Append a counted entry, waiting for room; ``False`` (not added) once closed."""
        with self._lock:
            while self._counted >= self.capacity and not self._closed:
                self._not_full.wait()
            if self._closed:
                return False
            self._entries.append((entry, True))
            self._counted += 1
            self._not_empty.notify()
        self._ring()
        return True

    def put_control(self, entry: object) -> bool:
        """Append an entry that does not count against capacity; ``False`` once closed."""
        with self._lock:
            if self._closed:
                return False
            self._entries.append((entry, False))
            self._not_empty.notify()
        self._ring()
        return True

    def _ring(self) -> None:
        if self._bell is not None:
            self._bell.ring()

    def get(self, *, block: bool = True) -> tuple[T | object, float]:
        """Remove and return the oldest entry and the seconds spent waiting for it.

        With ``block=False``, ``(EMPTY, 0.0)`` when nothing is buffered.
        """
        with self._lock:
            waited = 0.0
            if not self._entries:
                if not block:
                    return EMPTY, 0.0
                start = time.perf_counter()
                while not self._entries:
                    self._not_empty.wait()
                waited = time.perf_counter() - start
            entry, counted = self._entries.popleft()
            if counted:
                self._counted -= 1
                self._not_full.notify()
            return entry, waited

    def close(self) -> None:
        """Stop accepting entries and wake a producer waiting for room. Idempotent."""
        with self._lock:
            self._closed = True
            self._not_full.notify_all()
            self._not_empty.notify_all()
        self._ring()


class Worker:
    """A named daemon thread running ``target(stop)`` until it returns or ``stop`` is set.

    ``target`` receives the stop event and should return promptly once it is set (waiting
    with ``stop.wait(period)`` rather than ``time.sleep``). :meth:`stop` sets the event and
    joins the thread (unless called from the thread itself), so after it returns the worker
    has ended. Start and stop are idempotent.
    """

    __slots__ = ("_stop", "_thread", "name")

    def __init__(self, name: str, target: Callable[[threading.Event], Any]) -> None:
        self.name = name
        self._stop = threading.Event()
        self._thread = threading.Thread(target=target, args=(self._stop,), name=name, daemon=True)

    @property
    def stopping(self) -> bool:
        """Whether :meth:`stop` was called."""
        return self._stop.is_set()

    @property
    def stop_event(self) -> threading.Event:
        """Set once :meth:`stop` was called (for waits that must end with the thread)."""
        return self._stop

    def start(self) -> Worker:
        """Start the thread (once)."""
        if not self._thread.is_alive() and self._thread.ident is None:
            self._thread.start()
        return self

    def stop(self, *, wait: bool = True) -> None:
        """Ask the thread to stop and, with ``wait``, wait until it has ended."""
        self._stop.set()
        thread = self._thread
        if wait and thread.ident is not None and thread is not threading.current_thread():
            thread.join()

    def is_alive(self) -> bool:
        """Whether the thread is running."""
        return self._thread.is_alive()


class Backoff:
    """Polling delays that double from ``floor`` up to ``ceiling``, and reset on progress."""

    __slots__ = ("_delay", "ceiling", "floor")

    def __init__(self, ceiling: float, floor: float | None = None) -> None:
        self.ceiling = ceiling
        self.floor = min(ceiling, 0.001) if floor is None else floor
        self._delay = self.floor

    def reset(self) -> None:
        """Progress was made: the next delay is the shortest again."""
        self._delay = self.floor

    def next(self) -> float:
        """The next delay in seconds."""
        delay = self._delay
        self._delay = min(self.ceiling, self._delay * 2)
        return delay
