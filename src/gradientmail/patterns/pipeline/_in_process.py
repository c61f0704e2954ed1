"""The in-process transport: items travel by reference between threads of one process.

One lock guards the buffer, the waiting consumers and the producers' states, so "every
producer has finished and nothing is buffered" is read at one moment, and only the last
producer to finish wakes the consumers (``docs/pipeline.md`` says why this matters). Each
item goes straight to the longest-waiting consumer and is buffered only when none waits,
so no consumer waits while an item sits in the buffer.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any

from gradientmail._errors import (
    PipelineAbortedError,
    PipelineStalledError,
    ProducerFailedError,
    ProducerRegistrationError,
)
from gradientmail.patterns._workers import CarriedError
from gradientmail.patterns.pipeline._roles import Consumer, Decode, Producer, Transport
from gradientmail.patterns.pipeline._stats import ConsumerStats, ProducerStats

__all__ = ["EntryBuffer", "InProcessTransport"]


class _Failure:
    """A producer's error, queued after its items."""

    __slots__ = ("carried", "items", "producer")

    def __init__(self, producer: str, items: int, carried: CarriedError) -> None:
        self.producer = producer
        self.items = items
        self.carried = carried


_NOTHING = object()


class _Waiter:
    """A consumer waiting in ``next()``: a producer hands it an entry directly."""

    __slots__ = ("entry", "handed_at", "handed_clock", "wake")

    def __init__(self, lock: threading.Lock) -> None:
        self.wake = threading.Condition(lock)
        self.entry: Any = _NOTHING
        self.handed_at = 0.0
        self.handed_clock = 0.0  # the transport's non-empty clock at the hand-off


class EntryBuffer:
    """The entries no consumer has taken yet, with a clock that runs only while there are
    some (for ``idle_while_available_s``). Used with the transport's lock held."""

    __slots__ = ("_entries", "_since", "_total")

    def __init__(self) -> None:
        self._entries: deque[Any] = deque()
        self._total = 0.0  # seconds non-empty before the current stretch
        self._since = 0.0  # when the current non-empty stretch began

    def __len__(self) -> int:
        return len(self._entries)

    def append(self, entry: Any, now: float) -> None:
        if not self._entries:
            self._since = now
        self._entries.append(entry)

    def popleft(self) -> Any:
        entry = self._entries.popleft()
        if not self._entries:
            self._total += time.perf_counter() - self._since
        return entry

    def clock(self, now: float) -> float:
        """Seconds the buffer has been non-empty, up to ``now``."""
        if self._entries:
            return self._total + (now - self._since)
        return self._total


class InProcessTransport(Transport[Any]):
    """One lock guards the buffer, the waiting consumers and the producers' states.

    An entry goes straight to the longest-waiting consumer, and into the buffer only when no
    consumer waits; a consumer waits only when the buffer is empty. So the buffer is never
    non-empty while a consumer waits: no consumer idles beside a waiting item.
    """

    def __init__(self, declared: tuple[str, ...], capacity: int, stall: float | None) -> None:
        self.declared = declared
        self.capacity = capacity
        self.stall = stall
        self.lock = threading.Lock()
        self.not_full = threading.Condition(self.lock)
        self.buffer = EntryBuffer()
        self.waiters: deque[_Waiter] = deque()
        self.data_items = 0  # items in the buffer that count against capacity
        self.registered: set[str] = set()
        self.finished: set[str] = set()
        self.failure: ProducerFailedError | None = None
        self.aborted: str | None = None

    # All methods below with a leading underscore run with self.lock held.

    def _deliver(self, entry: Any) -> bool:
        """Hand ``entry`` to the longest-waiting consumer; buffer it if none waits.

        Returns whether it was buffered.
        """
        now = time.perf_counter()
        if self.waiters:
            waiter = self.waiters.popleft()
            waiter.entry = entry
            waiter.handed_at = now
            waiter.handed_clock = self.buffer.clock(now)
            waiter.wake.notify()
            return False
        self.buffer.append(entry, now)
        return True

    def _wake_everyone(self) -> None:
        for waiter in self.waiters:
            waiter.wake.notify()
        self.not_full.notify_all()

    def _raise_if_stopped(self) -> None:
        if self.failure is not None:
            raise PipelineAbortedError(
                f"the pipeline failed ({self.failure.summary}); no more items are taken"
            )
        if self.aborted is not None:
            raise PipelineAbortedError(f"the pipeline was aborted: {self.aborted}")

    def _unfinished(self) -> str:
        return ", ".join(
            f"{p} ({'registered' if p in self.registered else 'not registered'})"
            for p in self.declared
            if p not in self.finished
        )

    def producer(self, producer_id: str) -> Producer[Any]:
        with self.lock:
            if producer_id in self.registered:
                raise ProducerRegistrationError(
                    f"producer {producer_id!r} has already registered; each declared id "
                    "registers once per pipeline"
                )
            self.registered.add(producer_id)
        return _InProcessProducer(self, producer_id)

    def consumer(self, consumer_id: str, decode: Decode | None) -> Consumer[Any]:
        return _InProcessConsumer(self, consumer_id, decode)

    def abort(self, reason: str) -> None:
        with self.lock:
            if self.aborted is None:
                self.aborted = reason
            self._wake_everyone()

    def finish(self, producer_id: str, failure: _Failure | None) -> None:
        with self.lock:
            self.finished.add(producer_id)
            if failure is not None and self.failure is None and self.aborted is None:
                # After the producer's items, outside the capacity: a failing producer
                # never waits for room to report its failure. (Once the pipeline has
                # failed or been aborted, consumers already stop with the first cause.)
                self._deliver(failure)
            if len(self.finished) == len(self.declared):
                # The last producer to finish wakes every consumer, and only it does.
                self._wake_everyone()


class _InProcessProducer(Producer[Any]):
    def __init__(self, core: InProcessTransport, producer_id: str) -> None:
        super().__init__(producer_id, ProducerStats())
        self._core = core

    def put(self, item: Any) -> None:
        core = self._core
        with core.lock:
            self._check_open()
            core._raise_if_stopped()
            if core.data_items >= core.capacity:
                # (A full buffer means no consumer waits, so there is no one to hand to.)
                start = time.perf_counter()
                deadline = None if core.stall is None else start + core.stall
                while core.data_items >= core.capacity:
                    remaining = None if deadline is None else deadline - time.perf_counter()
                    if remaining is not None and remaining <= 0:
                        self.stats.blocked_s += time.perf_counter() - start
                        raise PipelineStalledError(
                            f"producer {self.id!r} waited {core.stall}s for room: "
                            f"{core.capacity} items are buffered and no consumer took one "
                            "(are the consumers running?)"
                        )
                    core.not_full.wait(remaining)
                    core._raise_if_stopped()
                self.stats.blocked_s += time.perf_counter() - start
            if core._deliver((self.id, item)):
                core.data_items += 1
            if core.data_items < core.capacity:
                # Room remains (we may have handed our item over instead of filling the
                # slot we were woken for): pass the wake-up on to another waiting producer.
                core.not_full.notify()
            self.stats.items += 1

    def done(self) -> None:
        if self._finished:
            return
        self._finished = True
        self._core.finish(self.id, None)

    def fail(self, error: BaseException) -> None:
        if self._finished:
            return
        self._finished = True
        self._core.finish(self.id, _Failure(self.id, self.stats.items, CarriedError.of(error)))


class _InProcessConsumer(Consumer[Any]):
    def __init__(self, core: InProcessTransport, consumer_id: str, decode: Decode | None) -> None:
        super().__init__(consumer_id, ConsumerStats(idle_while_available_s=0.0))
        self._core = core
        self._decode = decode
        self._closed = False
        self._waiter = _Waiter(core.lock)

    def close(self) -> None:
        self._closed = True

    def __next__(self) -> Any:
        item = self._take()
        return item if self._decode is None else self._decode(item)

    def _take(self) -> Any:
        if self._closed:
            raise StopIteration
        core = self._core
        stats = self.stats
        waiter = self._waiter
        with core.lock:
            start = time.perf_counter()
            clock_start = core.buffer.clock(start)
            clock_end: float | None = None  # set when an item is handed to us
            try:
                while True:
                    if core.failure is not None:
                        raise core.failure.copy()
                    if core.aborted is not None:
                        raise PipelineAbortedError(f"the pipeline was aborted: {core.aborted}")
                    if core.buffer:
                        entry = core.buffer.popleft()
                        if not isinstance(entry, _Failure):
                            core.data_items -= 1
                            core.not_full.notify()
                        return self._accept(entry)
                    if len(core.finished) == len(core.declared):
                        self._closed = True
                        raise StopIteration
                    timeout = None
                    if core.stall is not None:
                        timeout = start + core.stall - time.perf_counter()
                    if timeout is None or timeout > 0:
                        waiter.entry = _NOTHING
                        core.waiters.append(waiter)
                        waiter.wake.wait(timeout)
                        if waiter.entry is not _NOTHING:  # handed to us (and dequeued)
                            entry, waiter.entry = waiter.entry, _NOTHING
                            # From the hand-off on we are no longer idle, only waking up.
                            clock_end = waiter.handed_clock
                            stats.wake_latency.add(time.perf_counter() - waiter.handed_at)
                            return self._accept(entry)
                        core.waiters.remove(waiter)
                        timeout = (
                            None if core.stall is None else start + core.stall - time.perf_counter()
                        )
                    if (
                        timeout is not None
                        and timeout <= 0
                        and core.failure is None
                        and core.aborted is None
                        and len(core.finished) < len(core.declared)
                    ):
                        raise PipelineStalledError(
                            f"consumer {self.id!r} found no item for {core.stall}s; "
                            f"producers not finished: {core._unfinished()}"
                        )
            finally:
                now = time.perf_counter()
                stats.wait_s += now - start
                stats.waits.add(now - start)
                if clock_end is None:
                    clock_end = core.buffer.clock(now)
                assert stats.idle_while_available_s is not None
                stats.idle_while_available_s += clock_end - clock_start

    def _accept(self, entry: Any) -> Any:
        """Return a data entry's item, or fail the pipeline on a producer's failure."""
        core = self._core
        if isinstance(entry, _Failure):
            if core.failure is None:  # the first failure reached is the pipeline's
                carried = entry.carried
                core.failure = ProducerFailedError.after(
                    entry.producer,
                    entry.items,
                    carried.type_name,
                    carried.message,
                    carried.traceback_text,
                )
                core.failure.__cause__ = carried.original
                core._wake_everyone()
            raise core.failure.copy()
        self.stats.items += 1
        return entry[1]
