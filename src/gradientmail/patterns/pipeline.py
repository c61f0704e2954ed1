"""Producer/consumer pipelines: many producers feed many consumers, exactly once.

One API, two transports::

    from gradientmail.patterns.pipeline import Pipeline

    # in one process: objects (GPU tensors) travel by reference between threads
    pipe = Pipeline.in_process(producers=["target-0", "target-1"], capacity=8)
    # across processes and hosts: bytes through any mailbox URL
    pipe = Pipeline.over_mailbox(box, producers=["gen-0", "gen-1"], capacity=8)

    with pipe.producer("target-0") as out:      # in a producer thread or process
        for item in make_items():
            out.put(item)                         # waits while the pipeline is full

    with pipe.consumer("drafter-0") as items:    # in a consumer thread or process
        for item in items:
            train(item)

    # over a mailbox, decode bytes in the consumer's prefetch thread, ahead of the loop
    with pipe.consumer("trainer", decode=bytes_to_tensors) as batches: ...

Termination protocol
    * The set of producers is **declared** when the pipeline is made (``producers=``). Every
      handle of one mailbox pipeline must declare the same set; the first handle stores it
      in the mailbox and the others check it (``ConfigurationError`` on a mismatch).
    * A producer **registers** by opening ``pipe.producer(id)``. A declared producer may
      register at any time, before or after consumers start and after other producers
      have finished. A **late registration is refused**: an id that was not declared, or
      one that has already registered, raises :class:`ProducerRegistrationError`. The set
      is closed up front because that is the only way a consumer can tell "no producer
      will ever send again" from "a producer has not started yet".
    * Each producer **finishes** exactly once: ``done()`` (or leaving its ``with`` block
      normally) or ``fail(exc)`` (or leaving it through an exception). After that its
      ``put`` raises.
    * A consumer **stops** only when every declared producer has finished *and* every item
      has been taken. A producer that makes zero items or finishes first changes nothing
      for the consumers: they keep waiting for the others.
    * In process, the check "all finished and nothing buffered" and the wait run under the
      one lock that also guards the buffer, the waiting consumers and the producers'
      states, and only the **last producer to finish wakes every consumer**; a producer
      finishing earlier wakes nobody. Each item is handed straight to the longest-waiting
      consumer, and buffered only when none waits, so no consumer ever waits while an item
      sits in the buffer. A finished producer can put nothing more, so once a consumer sees
      "all finished and empty" under the lock, no item can appear later.
    * Over a mailbox, each producer's items are numbered ``0, 1, 2, ...`` and its
      ``producers/{id}/end`` record holds its final count, written with ``put_if_absent``
      after its last item. A consumer stops when every declared producer has an end record
      and its own cursor for each producer has reached that count (every item below the
      count is claimed, by it or by another consumer). The count, not a message, carries
      the end, so no ordering between "last item" and "end" can be lost.

    Why the naive protocols are wrong, and this one is not:

    * *One sentinel per producer, in the shared queue*: each consumer counts the
      sentinels it happens to take, so the first one to collect "enough" exits while items
      are still coming, and the others never see enough and hang. Here no sentinel exists:
      termination is a property of shared state (all finished, buffer empty), which every
      consumer evaluates for itself.
    * *Sentinels queued up front, or behind the data by a coordinator*: a sentinel can be
      taken before the last data item is put, so a consumer exits while a producer still
      sends. Here the end is the count (mailbox) or the finished set (in process), and a
      finished producer cannot send.
    * *A done-counter checked beside the queue*: "is the queue empty?" and "are all
      producers done?" are read at different moments, so a consumer can see an empty
      queue, then a producer puts its last item and marks done, then the consumer sees
      "all done" and exits, leaving the item; or it blocks in ``get()`` after the last
      item was taken and is never woken. Here both facts are read under one lock, and
      the wait is on a condition that the last finisher signals under that lock.

Backpressure
    ``capacity`` bounds the items put and not yet taken. In process the bound is exact and
    global: a producer waits while ``capacity`` items are buffered. Over a mailbox a global
    count would need every producer to read every other producer's progress, so each
    producer gets a share, ``ceil(capacity / len(producers))``: producer ``p`` writes item
    ``n`` only once ``claims/p/{n - share}`` exists. Claims of one producer's items form a
    prefix (a consumer claims ``n`` only after it has seen ``n - 1`` claimed), so that one
    cheap read proves at most ``share`` of ``p``'s items are unclaimed. Each consumer also
    holds up to ``prefetch`` claimed items ahead of its loop.

Failure
    * A producer that raises (inside ``with pipe.producer(...)``) or calls ``fail(exc)``
      puts an error after its items. The consumer that reaches it raises
      :class:`ProducerFailedError` naming the producer, with the original exception chained
      (in process) or its type, message and traceback as text (over a mailbox). The pipeline
      is then failed, and the first failure reached is the one reported: every other
      consumer raises the same error at its next step (over a mailbox, within one pass
      over the producers, or on seeing the ``aborted`` record while idle), and producers'
      ``put`` raises :class:`PipelineAbortedError`.
    * Over a mailbox each producer writes ``producers/{id}/heartbeat`` every
      ``heartbeat_interval`` seconds. A consumer that sees a registered producer's heartbeat
      unchanged for ``lease`` seconds (by its own clock, so host clocks need not agree)
      declares it lost by creating its end record with status ``lost`` and the number of
      items it stored; consumers then raise :class:`ProducerLostError` after its items. A
      producer that was only slow finds itself fenced: its ``put`` and ``done`` raise.
    * ``stall_timeout`` (seconds, ``None`` for no limit): a consumer that finds no item for
      that long raises :class:`PipelineStalledError` naming the producers not finished; a
      producer held by backpressure that long raises it too. So no one waits forever on a
      producer that never starts, or on consumers that are gone.

Mailbox layout (one run per mailbox namespace; a new run uses a new URL)::

    pipeline                    the declared producers and capacity (put_if_absent)
    producers/{id}/registered   who registered, created once (put_if_absent)
    producers/{id}/heartbeat    {beat, produced}, overwritten every heartbeat_interval
    producers/{id}/end          {status: done|failed|lost, count, error}, created once
    items/{id}/{seq}            the item's bytes (put_if_absent)
    claims/{id}/{seq}           the consumer that took it (put_if_absent, read back)
    aborted                     why the pipeline was stopped, if it was

Costs over a mailbox
    A consumer keeps a cursor per producer and visits producers round robin, so taking an
    item costs three calls: a read of the item, the claim (``put_if_absent``) and its
    read-back (:func:`gradientmail.patterns.common.claim`). Nothing is listed. A consumer
    reads an item before claiming it, because the Mailbox API has no cheaper existence
    check; with several consumers an item may be read twice, but it is delivered once, and
    after a lost claim a consumer skips ahead by reading claims only. While it finds nothing,
    a consumer polls each unfinished producer's next item and end record with a backoff from
    1 ms up to ``poll_interval``, and reads heartbeats once per ``heartbeat_interval``. A
    producer costs one ``put_if_absent`` per item, one read per backpressure poll, and a
    heartbeat write plus two reads per ``heartbeat_interval``.

    A consumer checks leases only while it has nothing else to take, so a dead producer is
    reported once the live ones have nothing ready. Closing a consumer early drops the items
    it had already claimed and not returned (at most ``prefetch``): claims are permanent.

Statistics
    ``pipe.stats()`` returns, for the producers and consumers opened through this handle,
    items produced and consumed, time producers were held by backpressure, time consumers
    waited in ``next()`` (total and per call), and in process the part of that wait during
    which an item sat unassigned in the buffer, and the wake-up latency after a hand-off.
"""

from __future__ import annotations

import json
import math
import os
import re
import socket
import threading
import time
import zlib
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Generic, TypeVar, overload

from gradientmail.backends.base import as_bytes
from gradientmail.errors import (
    ConfigurationError,
    GradientMailError,
    KeyNotFoundError,
    NotSupportedError,
    PipelineAbortedError,
    PipelineError,
    PipelineStalledError,
    ProducerFailedError,
    ProducerLostError,
    ProducerRegistrationError,
)
from gradientmail.mailbox import Capability, Mailbox
from gradientmail.patterns.claims import claim
from gradientmail.patterns.stats import Latencies, Stats
from gradientmail.patterns.workers import CarriedError, HandoffBuffer

__all__ = [
    "Consumer",
    "ConsumerStats",
    "Pipeline",
    "PipelineAbortedError",
    "PipelineError",
    "PipelineStalledError",
    "PipelineStats",
    "Producer",
    "ProducerFailedError",
    "ProducerLostError",
    "ProducerRegistrationError",
    "ProducerStats",
]

T = TypeVar("T")
U = TypeVar("U")
Decode = Callable[[Any], Any]

_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")
_SEQ_DIGITS = 12
_DEFAULT_STALL = 600.0


# -- statistics -----------------------------------------------------------------------------


@dataclass
class ProducerStats(Stats):
    """One producer's counters (only for producers opened through this handle)."""

    #: items put.
    items: int = 0
    #: seconds spent waiting for room (backpressure).
    blocked_s: float = 0.0


@dataclass
class ConsumerStats(Stats):
    """One consumer's counters (only for consumers opened through this handle)."""

    #: items returned by ``next()``.
    items: int = 0
    #: seconds spent inside ``next()`` waiting for an item.
    wait_s: float = 0.0
    #: each ``next()`` call's wait (count, mean, p99, max).
    waits: Latencies = field(default_factory=Latencies)
    #: In process: the part of ``wait_s`` during which an item sat in the buffer, unassigned.
    #: Items go straight to waiting consumers, so this stays near 0 (the microseconds of
    #: taking an item); it is measured, not assumed. ``None`` over a mailbox.
    idle_while_available_s: float | None = None
    #: In process: from a producer handing this consumer an item to the consumer running
    #: again (the scheduler's wake-up latency). Empty over a mailbox.
    wake_latency: Latencies = field(default_factory=Latencies)
    #: Mailbox: claims lost to another consumer.
    claims_lost: int = 0


@dataclass
class PipelineStats:
    """A snapshot of ``pipe.stats()``."""

    producers: dict[str, ProducerStats] = field(default_factory=dict)
    consumers: dict[str, ConsumerStats] = field(default_factory=dict)

    @property
    def produced(self) -> int:
        """Items put by the producers opened through this handle."""
        return sum(s.items for s in self.producers.values())

    @property
    def consumed(self) -> int:
        """Items taken by the consumers opened through this handle."""
        return sum(s.items for s in self.consumers.values())


# -- helpers --------------------------------------------------------------------------------


def _check_id(value: object, what: str) -> str:
    if not isinstance(value, str) or not _ID.match(value):
        raise ConfigurationError(
            f"{what} {value!r} is not a valid id: use 1-128 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit (it becomes a key segment)"
        )
    return value


def _check_declared(producers: Iterable[str]) -> tuple[str, ...]:
    if isinstance(producers, str):
        raise ConfigurationError(
            f"producers must be a collection of ids, not the string {producers!r}; "
            f"write producers=[{producers!r}]"
        )
    declared = tuple(_check_id(p, "producer id") for p in producers)
    if not declared:
        raise ConfigurationError("producers must declare at least one producer id")
    duplicates = sorted({p for p in declared if declared.count(p) > 1})
    if duplicates:
        raise ConfigurationError(f"producer ids must be unique; repeated: {duplicates}")
    return declared


def _check_positive(value: object, what: str, *, allow_none: bool = False) -> Any:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        none = " or None" if allow_none else ""
        raise ConfigurationError(f"{what} must be a positive number{none}, not {value!r}")
    return value


def _failed_from(carried: CarriedError, producer: str, items: int) -> ProducerFailedError:
    return ProducerFailedError(
        f"producer {producer!r} failed after putting {items} item(s): "
        f"{carried.type_name}: {carried.message}",
        producer=producer,
        items=items,
        error_type=carried.type_name,
        worker_traceback=carried.traceback_text,
    )


def _copy_failure(error: ProducerFailedError) -> ProducerFailedError:
    """A fresh copy for another consumer thread (tracebacks must not be shared)."""
    copy = type(error)(
        error.summary,
        producer=error.producer,
        items=error.items,
        error_type=error.error_type,
        worker_traceback=error.worker_traceback,
    )
    copy.__cause__ = error.__cause__
    return copy


# -- the public API -------------------------------------------------------------------------


class Producer(ABC, Generic[T]):
    """One registered producer. Use it as a context manager, or call ``done``/``fail``.

    Leaving the ``with`` block normally calls ``done()``; leaving it through an exception
    calls ``fail(exc)`` and lets the exception continue in the producer. A handle is used
    by one thread at a time; give each producing thread its own declared id.
    """

    def __init__(self, producer_id: str, stats: ProducerStats) -> None:
        self.id = producer_id
        self.stats = stats
        self._finished = False

    @abstractmethod
    def put(self, item: T) -> None:
        """Add one item, waiting while the pipeline is full.

        Raises:
            PipelineAbortedError: the pipeline failed or was aborted, or this producer was
                declared lost.
            PipelineStalledError: no room appeared for ``stall_timeout`` seconds.
            PipelineError: this producer has already finished.
        """

    @abstractmethod
    def done(self) -> None:
        """Mark this producer finished after its last item. Idempotent."""

    @abstractmethod
    def fail(self, error: BaseException) -> None:
        """Mark this producer failed: consumers raise ``ProducerFailedError`` after its items."""

    def _check_open(self) -> None:
        if self._finished:
            raise PipelineError(
                f"producer {self.id!r} has already finished; put() after done() or fail() "
                "would be lost"
            )

    def __enter__(self) -> Producer[T]:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None:
            self.done()
        elif not self._finished:
            self.fail(exc)


class Consumer(ABC, Generic[T]):
    """One consumer: iterate it to take items until the pipeline ends.

    Iteration stops when every declared producer has finished and every item is taken.
    It raises ``ProducerFailedError`` (after the failed producer's items),
    ``PipelineStalledError`` or ``PipelineAbortedError``. Use it as a context manager so
    that a mailbox consumer's prefetch thread is stopped when you leave early. A handle is
    iterated by one thread; open one consumer per consuming thread.
    """

    def __init__(self, consumer_id: str, stats: ConsumerStats) -> None:
        self.id = consumer_id
        self.stats = stats

    def __iter__(self) -> Iterator[T]:
        return self

    @abstractmethod
    def __next__(self) -> T: ...

    def close(self) -> None:
        """Stop taking items. Items already claimed by a mailbox consumer are not returned."""

    def __enter__(self) -> Consumer[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Transport(ABC, Generic[T]):
    declared: tuple[str, ...]

    @abstractmethod
    def producer(self, producer_id: str) -> Producer[T]: ...

    @abstractmethod
    def consumer(self, consumer_id: str, decode: Decode | None) -> Consumer[Any]: ...

    @abstractmethod
    def abort(self, reason: str) -> None: ...


class Pipeline(Generic[T]):
    """A producer/consumer pipeline; make one with :meth:`in_process` or :meth:`over_mailbox`."""

    def __init__(self, transport: _Transport[T]) -> None:
        self._transport = transport
        self._lock = threading.Lock()
        self._producers: dict[str, ProducerStats] = {}
        self._consumers: dict[str, ConsumerStats] = {}
        self._consumer_count = 0

    @classmethod
    def in_process(
        cls,
        producers: Iterable[str],
        *,
        capacity: int = 16,
        stall_timeout: float | None = _DEFAULT_STALL,
    ) -> Pipeline[Any]:
        """A pipeline between threads of this process; items travel by reference.

        Nothing is copied or serialized, so items may be GPU tensors.

        Args:
            producers: the ids of every producer that will register (see the module doc).
            capacity: the most items put and not yet taken; a producer waits beyond it.
            stall_timeout: seconds a consumer waits for one item, or a producer for room,
                before raising ``PipelineStalledError``; ``None`` waits forever.
        """
        declared = _check_declared(producers)
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ConfigurationError(f"capacity must be a positive int, not {capacity!r}")
        _check_positive(stall_timeout, "stall_timeout", allow_none=True)
        return Pipeline(_LocalTransport(declared, capacity, stall_timeout))

    @classmethod
    def over_mailbox(
        cls,
        mailbox: Mailbox,
        producers: Iterable[str],
        *,
        capacity: int = 16,
        stall_timeout: float | None = _DEFAULT_STALL,
        prefetch: int = 2,
        heartbeat_interval: float = 1.0,
        lease: float = 15.0,
        poll_interval: float = 0.05,
    ) -> Pipeline[bytes]:
        """A pipeline of ``bytes`` through ``mailbox``, across threads, processes and hosts.

        Open one handle per process on the same mailbox URL with the same arguments. Each
        item is claimed with ``put_if_absent`` and the claim is read back, so each is
        delivered exactly once.

        Args:
            mailbox: the run's mailbox; a new run needs a new, empty namespace.
            producers: the ids of every producer that will register (see the module doc).
            capacity: the bound on unclaimed items, enforced per producer as
                ``ceil(capacity / len(producers))`` (see Backpressure in the module doc).
            stall_timeout: see :meth:`in_process`.
            prefetch: items a consumer claims and reads ahead of its loop.
            heartbeat_interval: seconds between a producer's heartbeats.
            lease: seconds of unchanged heartbeat after which a producer is declared lost.
            poll_interval: the longest pause between polls of the store when idle (polls
                start at a millisecond and back off to this).

        Raises:
            ConfigurationError: a bad argument, or the mailbox already holds a pipeline
                declared with other producers or capacity.
            NotSupportedError: the mailbox does not declare ``Capability.ATOMIC_CREATE``,
                so claims could not make delivery exactly once.
        """
        if not mailbox.supports(Capability.ATOMIC_CREATE):
            raise NotSupportedError(
                f"a pipeline over {mailbox.url} needs atomic put_if_absent "
                "(Capability.ATOMIC_CREATE), which this mailbox does not declare; without it "
                "two consumers could both claim one item"
            )
        declared = _check_declared(producers)
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ConfigurationError(f"capacity must be a positive int, not {capacity!r}")
        if isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 1:
            raise ConfigurationError(f"prefetch must be a positive int, not {prefetch!r}")
        _check_positive(stall_timeout, "stall_timeout", allow_none=True)
        _check_positive(heartbeat_interval, "heartbeat_interval")
        _check_positive(lease, "lease")
        _check_positive(poll_interval, "poll_interval")
        if lease <= 2 * heartbeat_interval:
            raise ConfigurationError(
                f"lease ({lease}) must be more than twice heartbeat_interval "
                f"({heartbeat_interval}), or a live producer could be declared lost"
            )
        transport = _MailboxTransport(
            mailbox,
            declared,
            capacity=capacity,
            stall_timeout=stall_timeout,
            prefetch=prefetch,
            heartbeat_interval=heartbeat_interval,
            lease=lease,
            poll_interval=poll_interval,
        )
        return Pipeline(transport)

    @property
    def producer_ids(self) -> tuple[str, ...]:
        """The declared producer ids."""
        return self._transport.declared

    def producer(self, producer_id: str) -> Producer[T]:
        """Register producer ``producer_id`` and return its handle.

        Raises:
            ProducerRegistrationError: the id was not declared, or has already registered.
        """
        _check_id(producer_id, "producer id")
        if producer_id not in self._transport.declared:
            raise ProducerRegistrationError(
                f"producer {producer_id!r} was not declared; this pipeline accepts only "
                f"{list(self._transport.declared)} (late registration is refused, so that "
                "consumers can know when every producer is done)"
            )
        handle = self._transport.producer(producer_id)
        with self._lock:
            self._producers[producer_id] = handle.stats
        return handle

    @overload
    def consumer(self, consumer_id: str | None = None) -> Consumer[T]: ...

    @overload
    def consumer(
        self, consumer_id: str | None = None, *, decode: Callable[[T], U]
    ) -> Consumer[U]: ...

    def consumer(
        self, consumer_id: str | None = None, *, decode: Callable[[Any], Any] | None = None
    ) -> Consumer[Any]:
        """Open a consumer. Any number may be open, in any threads or processes.

        Args:
            consumer_id: a name for statistics and claims; defaults to
                ``{hostname}-{pid}-{n}``.
            decode: applied to each item before the consumer returns it (bytes to tensors,
                say). Over a mailbox it runs in the prefetch thread, ahead of the loop, so
                the loop gets ready items; an error in it reaches the loop as a
                ``WorkerError`` with the original chained. In process it runs in the
                consumer's thread, and its errors propagate as they are.
        """
        with self._lock:
            self._consumer_count += 1
            number = self._consumer_count
        if consumer_id is None:
            host = re.sub(r"[^A-Za-z0-9._-]", "_", socket.gethostname())[:64] or "host"
            consumer_id = f"{host}-{os.getpid()}-{number}"
        _check_id(consumer_id, "consumer id")
        if decode is not None and not callable(decode):
            raise ConfigurationError(f"decode must be callable, not {type(decode).__name__}")
        handle = self._transport.consumer(consumer_id, decode)
        with self._lock:
            self._consumers[consumer_id] = handle.stats
        return handle

    def abort(self, reason: str = "aborted by the user") -> None:
        """Stop the pipeline: consumers and producers raise ``PipelineAbortedError``."""
        self._transport.abort(reason)

    def stats(self) -> PipelineStats:
        """Counters of the producers and consumers opened through this handle (copies)."""
        with self._lock:
            return PipelineStats(
                producers={k: v.snapshot() for k, v in self._producers.items()},
                consumers={k: v.snapshot() for k, v in self._consumers.items()},
            )


# -- in-process transport -------------------------------------------------------------------


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


class _LocalTransport(_Transport[Any]):
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
        self.buffer: deque[Any] = deque()
        self.waiters: deque[_Waiter] = deque()
        self.data_items = 0  # items in the buffer that count against capacity
        self.registered: set[str] = set()
        self.finished: set[str] = set()
        self.failure: ProducerFailedError | None = None
        self.aborted: str | None = None
        # A clock that runs only while the buffer is non-empty, for idle_while_available_s.
        self.nonempty_total = 0.0
        self.nonempty_since = 0.0

    # All methods below with a leading underscore run with self.lock held.

    def _nonempty_clock(self, now: float) -> float:
        if self.buffer:
            return self.nonempty_total + (now - self.nonempty_since)
        return self.nonempty_total

    def _deliver(self, entry: Any) -> bool:
        """Hand ``entry`` to the longest-waiting consumer; buffer it if none waits.

        Returns whether it was buffered.
        """
        now = time.perf_counter()
        if self.waiters:
            waiter = self.waiters.popleft()
            waiter.entry = entry
            waiter.handed_at = now
            waiter.handed_clock = self._nonempty_clock(now)
            waiter.wake.notify()
            return False
        if not self.buffer:
            self.nonempty_since = now
        self.buffer.append(entry)
        return True

    def _popleft(self) -> Any:
        entry = self.buffer.popleft()
        if not self.buffer:
            self.nonempty_total += time.perf_counter() - self.nonempty_since
        return entry

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
        return _LocalProducer(self, producer_id)

    def consumer(self, consumer_id: str, decode: Decode | None) -> Consumer[Any]:
        return _LocalConsumer(self, consumer_id, decode)

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


class _LocalProducer(Producer[Any]):
    def __init__(self, core: _LocalTransport, producer_id: str) -> None:
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


class _LocalConsumer(Consumer[Any]):
    def __init__(self, core: _LocalTransport, consumer_id: str, decode: Decode | None) -> None:
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
            clock_start = core._nonempty_clock(start)
            clock_end: float | None = None  # set when an item is handed to us
            try:
                while True:
                    if core.failure is not None:
                        raise _copy_failure(core.failure)
                    if core.aborted is not None:
                        raise PipelineAbortedError(f"the pipeline was aborted: {core.aborted}")
                    if core.buffer:
                        entry = core._popleft()
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
                    clock_end = core._nonempty_clock(now)
                assert stats.idle_while_available_s is not None
                stats.idle_while_available_s += clock_end - clock_start

    def _accept(self, entry: Any) -> Any:
        """Return a data entry's item, or fail the pipeline on a producer's failure."""
        core = self._core
        if isinstance(entry, _Failure):
            if core.failure is None:  # the first failure reached is the pipeline's
                core.failure = _failed_from(entry.carried, entry.producer, entry.items)
                core.failure.__cause__ = entry.carried.original
                core._wake_everyone()
            raise _copy_failure(core.failure)
        self.stats.items += 1
        return entry[1]


# -- mailbox transport ----------------------------------------------------------------------


def _json(data: dict[str, Any]) -> bytes:
    return json.dumps(data, sort_keys=True).encode("utf-8")


def _read_json(mailbox: Mailbox, key: str) -> dict[str, Any] | None:
    try:
        raw = mailbox.get(key)
    except KeyNotFoundError:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise PipelineError(
            f"{key!r} in {mailbox.url} does not hold a pipeline record; is this mailbox "
            "used by something else? Use a new, empty namespace per pipeline run"
        )
    return value


def _exists(mailbox: Mailbox, key: str) -> bool:
    try:
        mailbox.get(key)
    except KeyNotFoundError:
        return False
    return True


def _item_key(producer: str, seq: int) -> str:
    return f"items/{producer}/{seq:0{_SEQ_DIGITS}d}"


def _claim_key(producer: str, seq: int) -> str:
    return f"claims/{producer}/{seq:0{_SEQ_DIGITS}d}"


class _Backoff:
    """Polling pauses from a millisecond up to ``ceiling``, reset on progress."""

    def __init__(self, ceiling: float) -> None:
        self.ceiling = ceiling
        self.delay = 0.001

    def reset(self) -> None:
        self.delay = 0.001

    def next(self) -> float:
        delay = self.delay
        self.delay = min(self.ceiling, self.delay * 2)
        return delay


class _MailboxTransport(_Transport[bytes]):
    def __init__(
        self,
        mailbox: Mailbox,
        declared: tuple[str, ...],
        *,
        capacity: int,
        stall_timeout: float | None,
        prefetch: int,
        heartbeat_interval: float,
        lease: float,
        poll_interval: float,
    ) -> None:
        self.mailbox = mailbox
        self.declared = declared
        self.capacity = capacity
        self.share = math.ceil(capacity / len(declared))
        self.stall = stall_timeout
        self.prefetch = prefetch
        self.heartbeat_interval = heartbeat_interval
        self.lease = lease
        self.poll_interval = poll_interval
        self._check_manifest()

    def _check_manifest(self) -> None:
        manifest = {
            "kind": "gradientmail.pipeline",
            "version": 1,
            "producers": list(self.declared),
            "capacity": self.capacity,
        }
        if self.mailbox.put_if_absent("pipeline", _json(manifest)):
            return
        stored = _read_json(self.mailbox, "pipeline")
        if stored != manifest:
            raise ConfigurationError(
                f"{self.mailbox.url} already holds a pipeline declared as {stored}, but this "
                f"handle declares {manifest}; every handle of one run must pass the same "
                "producers and capacity (or use a new namespace for a new run)"
            )

    def producer(self, producer_id: str) -> Producer[bytes]:
        return _MailboxProducer(self, producer_id)

    def consumer(self, consumer_id: str, decode: Decode | None) -> Consumer[Any]:
        return _MailboxConsumer(self, consumer_id, decode)

    def abort(self, reason: str) -> None:
        self.mailbox.put_if_absent("aborted", _json({"reason": reason}))

    def aborted_reason(self) -> str | None:
        record = _read_json(self.mailbox, "aborted")
        return None if record is None else str(record.get("reason", "unknown"))


class _MailboxProducer(Producer[bytes]):
    def __init__(self, core: _MailboxTransport, producer_id: str) -> None:
        super().__init__(producer_id, ProducerStats())
        self._core = core
        self._box = core.mailbox
        self._token = os.urandom(8).hex()
        self._seq = 0
        self._claimed = 0  # a lower bound on how many of our items are claimed
        self._stopped: str | None = None  # set by the heartbeat thread: fenced or aborted
        self._stop_heartbeat = threading.Event()
        record = {"host": socket.gethostname(), "pid": os.getpid(), "token": self._token}
        if not self._box.put_if_absent(f"producers/{producer_id}/registered", _json(record)):
            raise ProducerRegistrationError(
                f"producer {producer_id!r} has already registered in {self._box.url} "
                f"({_read_json(self._box, f'producers/{producer_id}/registered')}); each "
                "declared id registers once per run"
            )
        self._beat = 0
        self._send_heartbeat()
        self._heartbeat = threading.Thread(
            target=self._heartbeat_loop, name=f"gradientmail-heartbeat-{producer_id}", daemon=True
        )
        self._heartbeat.start()

    # -- heartbeat ----------------------------------------------------------------------

    def _send_heartbeat(self) -> None:
        self._beat += 1
        body = {"token": self._token, "beat": self._beat, "produced": self._seq}
        self._box.put(f"producers/{self.id}/heartbeat", _json(body))

    def _heartbeat_loop(self) -> None:
        while not self._stop_heartbeat.wait(self._core.heartbeat_interval):
            try:
                self._send_heartbeat()
                end = _read_json(self._box, f"producers/{self.id}/end")
                if end is not None and end.get("token") != self._token:
                    self._stopped = (
                        f"producer {self.id!r} was declared {end.get('status')} by "
                        f"{end.get('by')} (its heartbeat was silent for over "
                        f"{self._core.lease}s); items from #{end.get('count')} on are discarded"
                    )
                    return  # fenced: nothing this producer does counts any more
                reason = self._core.aborted_reason()
                if reason is not None:
                    self._stopped = f"the pipeline was aborted: {reason}"
                    return
            except GradientMailError:
                # A store hiccup: the next beat retries. If the store stays unreachable,
                # consumers declare this producer lost and the fence stops it.
                continue

    def _stop(self) -> None:
        self._stop_heartbeat.set()
        if self._heartbeat is not threading.current_thread():
            self._heartbeat.join()

    def _raise_if_stopped(self) -> None:
        if self._stopped is not None:
            raise PipelineAbortedError(self._stopped)

    # -- items --------------------------------------------------------------------------

    def put(self, item: bytes) -> None:
        self._check_open()
        body = as_bytes(item)
        self._raise_if_stopped()
        if self._seq - self._claimed >= self._core.share:
            self._wait_for_room()
        key = _item_key(self.id, self._seq)
        if not self._box.put_if_absent(key, body):
            raise PipelineError(
                f"{key!r} already exists: another process is writing as producer {self.id!r}, "
                "or the mailbox holds an earlier run; use a new namespace per run"
            )
        self._seq += 1
        self.stats.items += 1

    def _wait_for_room(self) -> None:
        core = self._core
        start = time.perf_counter()
        backoff = _Backoff(core.poll_interval)
        try:
            while True:
                needed = self._seq - core.share  # claims form a prefix: this one suffices
                if _exists(self._box, _claim_key(self.id, needed)):
                    self._claimed = needed + 1
                    return
                self._raise_if_stopped()
                waited = time.perf_counter() - start
                if core.stall is not None and waited > core.stall:
                    raise PipelineStalledError(
                        f"producer {self.id!r} waited {waited:.1f}s for room: its item "
                        f"#{needed} is still unclaimed and {core.share} item(s) are ahead of "
                        "the consumers (are the consumers running?)"
                    )
                time.sleep(backoff.next())
        finally:
            self.stats.blocked_s += time.perf_counter() - start

    def _finish(self, record: dict[str, Any]) -> None:
        self._finished = True
        record.update(token=self._token, count=self._seq, by=self.id)
        try:
            stored = self._box.put_if_absent(f"producers/{self.id}/end", _json(record))
        finally:
            self._stop()
        if not stored:
            other = _read_json(self._box, f"producers/{self.id}/end") or {}
            raise PipelineAbortedError(
                f"producer {self.id!r} was already declared {other.get('status')} by "
                f"{other.get('by')} after {other.get('count')} item(s); its later items "
                "are discarded"
            )

    def done(self) -> None:
        if self._finished:
            return
        self._finish({"status": "done"})

    def fail(self, error: BaseException) -> None:
        if self._finished:
            return
        carried = CarriedError.of(error)
        self._finish(
            {
                "status": "failed",
                "error": {
                    "type": carried.type_name,
                    "message": carried.message,
                    "traceback": carried.traceback_text,
                },
            }
        )


@dataclass
class _Cursor:
    """One consumer's view of one producer."""

    producer: str
    next: int = 0
    end: dict[str, Any] | None = None
    catching_up: bool = True
    heartbeat: bytes | None = None
    heartbeat_changed: float = 0.0
    checked: float = 0.0

    def exhausted(self) -> bool:
        return self.end is not None and self.next >= int(self.end["count"])


_END = object()


class _Item:
    """A decoded item in the prefetch buffer (so that no item is mistaken for a marker)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


class _MailboxConsumer(Consumer[Any]):
    def __init__(self, core: _MailboxTransport, consumer_id: str, decode: Decode | None) -> None:
        super().__init__(consumer_id, ConsumerStats())
        self._core = core
        self._box = core.mailbox
        self._decode = decode
        self._buffer: HandoffBuffer[Any] = HandoffBuffer(core.prefetch)
        self._stop = threading.Event()
        self._done = False
        now = time.monotonic()
        self._cursors = [_Cursor(p, heartbeat_changed=now, checked=now) for p in core.declared]
        # Consumers start their round robin at different producers, so they collide less.
        self._turn = zlib.crc32(consumer_id.encode("utf-8")) % len(self._cursors)
        self._thread = threading.Thread(
            target=self._run, name=f"gradientmail-consumer-{consumer_id}", daemon=True
        )
        self._thread.start()

    # -- the consumer's side ------------------------------------------------------------

    def __next__(self) -> Any:
        if self._done:
            raise StopIteration
        entry, waited = self._buffer.get()
        self.stats.wait_s += waited
        self.stats.waits.add(waited)
        if entry is _END:
            self._done = True
            raise StopIteration
        if isinstance(entry, PipelineError):
            self._done = True
            raise entry
        if isinstance(entry, CarriedError):
            self._done = True
            entry.reraise(f"the prefetch thread of pipeline consumer {self.id!r}")
        assert isinstance(entry, _Item)
        self.stats.items += 1
        return entry.value

    def close(self) -> None:
        self._done = True
        self._stop.set()
        self._buffer.close()
        if self._thread is not threading.current_thread():
            self._thread.join()

    # -- the prefetch thread ------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._loop()
        except PipelineError as exc:
            self._buffer.put_control(exc)
        except BaseException as exc:  # noqa: BLE001 - every failure must reach the consumer
            self._buffer.put_control(CarriedError.of(exc))

    def _loop(self) -> None:
        core = self._core
        backoff = _Backoff(core.poll_interval)
        searching_since = time.perf_counter()
        aborted_checked = time.monotonic()
        while not self._stop.is_set():
            if time.monotonic() - aborted_checked >= core.heartbeat_interval:
                aborted_checked = time.monotonic()
                self._check_aborted()
            # Claim nothing while the consumer already holds `prefetch` items.
            held = time.perf_counter()
            if not self._buffer.wait_for_room():
                return
            searching_since += time.perf_counter() - held  # a full buffer is not a stall
            data = self._take_one()
            if data is not None:
                value = data if self._decode is None else self._decode(data)
                if not self._buffer.put(_Item(value)):
                    return
                backoff.reset()
                searching_since = time.perf_counter()
            for cursor in self._cursors:
                if cursor.exhausted() and cursor.end is not None and cursor.end["status"] != "done":
                    # Every item of this producer is claimed, ours already handed over.
                    self._box.put_if_absent(
                        "aborted",
                        _json(
                            {
                                "reason": f"producer {cursor.producer!r} ended "
                                f"{cursor.end['status']}",
                                "producer": cursor.producer,
                            }
                        ),
                    )
                    raise self._failure(cursor.producer, cursor.end)
            if data is not None:
                continue
            if all(c.exhausted() for c in self._cursors):
                self._buffer.put_control(_END)
                return
            self._watch(time.monotonic())
            waited = time.perf_counter() - searching_since
            if core.stall is not None and waited > core.stall:
                raise PipelineStalledError(
                    f"consumer {self.id!r} found no item for {waited:.1f}s; producers not "
                    f"finished: {self._describe_unfinished()}"
                )
            self._stop.wait(backoff.next())

    def _take_one(self) -> bytes | None:
        """Claim and read the next available item from any producer, round robin."""
        count = len(self._cursors)
        for offset in range(count):
            cursor = self._cursors[(self._turn + offset) % count]
            data = self._take_from(cursor)
            if data is not None:
                self._turn = (self._turn + offset + 1) % count
                return data
            if self._stop.is_set():
                return None
        return None

    def _take_from(self, cursor: _Cursor) -> bytes | None:
        box = self._box
        producer = cursor.producer
        while not cursor.exhausted():
            seq = cursor.next
            if cursor.catching_up:
                # Behind other consumers (at start, or after losing a claim): skip items
                # already claimed without reading them.
                if _exists(box, _claim_key(producer, seq)):
                    cursor.next += 1
                    continue
                cursor.catching_up = False
            try:
                data = box.get(_item_key(producer, seq))
            except KeyNotFoundError:
                if cursor.end is not None:
                    # The end record promises this item; an item never disappears.
                    raise PipelineError(
                        f"item #{seq} of producer {producer!r} is missing although its end "
                        f"record counts {cursor.end['count']} items; was the mailbox edited?"
                    ) from None
                cursor.end = self._read_end(producer)
                if cursor.end is None:
                    return None
                continue  # the end arrived: the item exists now, or the producer is exhausted
            if claim(box, _claim_key(producer, seq), self.id):
                cursor.next += 1
                cursor.heartbeat_changed = time.monotonic()
                return data
            # Another consumer is reading this producer too: skip ahead without reading,
            # and let the caller try the next producer rather than race on this one.
            self.stats.claims_lost += 1
            cursor.next += 1
            cursor.catching_up = True
            return None
        return None

    def _read_end(self, producer: str) -> dict[str, Any] | None:
        end = _read_json(self._box, f"producers/{producer}/end")
        if end is not None and not isinstance(end.get("count"), int):
            raise PipelineError(f"the end record of producer {producer!r} has no count: {end}")
        return end

    def _failure(self, producer: str, end: dict[str, Any]) -> ProducerFailedError:
        count = int(end.get("count", 0))
        if end.get("status") == "lost":
            return ProducerLostError(
                f"producer {producer!r} was lost after putting {count} item(s): its "
                f"heartbeat was unchanged for over {self._core.lease}s (declared by "
                f"{end.get('by')}); did its process die?",
                producer=producer,
                items=count,
            )
        error = end.get("error") or {}
        return ProducerFailedError(
            f"producer {producer!r} failed after putting {count} item(s): "
            f"{error.get('type', 'unknown error')}: {error.get('message', '')}",
            producer=producer,
            items=count,
            error_type=str(error.get("type", "")),
            worker_traceback=str(error.get("traceback", "")),
        )

    def _watch(self, now: float) -> None:
        """While idle: declare lost the producers whose heartbeat stopped."""
        core = self._core
        for cursor in self._cursors:
            if cursor.end is not None or now - cursor.checked < core.heartbeat_interval:
                continue
            cursor.checked = now
            try:
                beat = self._box.get(f"producers/{cursor.producer}/heartbeat")
            except KeyNotFoundError:
                continue  # not registered yet: only stall_timeout applies
            if beat != cursor.heartbeat:
                cursor.heartbeat = beat
                cursor.heartbeat_changed = now
            elif now - cursor.heartbeat_changed > core.lease:
                self._declare_lost(cursor, now - cursor.heartbeat_changed)

    def _check_aborted(self) -> None:
        """Raise if the pipeline was aborted, or failed through another consumer."""
        core = self._core
        aborted = _read_json(self._box, "aborted")
        if aborted is not None:
            producer = aborted.get("producer")
            end = self._read_end(producer) if producer in core.declared else None
            if end is not None and end.get("status") != "done":
                # Another consumer reached a failed producer: fail the same way.
                raise self._failure(str(producer), end)
            raise PipelineAbortedError(f"the pipeline was aborted: {aborted.get('reason')}")

    def _declare_lost(self, cursor: _Cursor, silent: float) -> None:
        producer = cursor.producer
        count = cursor.next
        while _exists(self._box, _item_key(producer, count)):
            count += 1
        record = {
            "status": "lost",
            "count": count,
            "by": self.id,
            "token": None,
            "silent_s": round(silent, 3),
        }
        self._box.put_if_absent(f"producers/{producer}/end", _json(record))
        cursor.end = self._read_end(producer)

    def _describe_unfinished(self) -> str:
        parts = []
        for cursor in self._cursors:
            if cursor.end is not None:
                continue
            state = "not registered" if cursor.heartbeat is None else "registered, heartbeating"
            parts.append(f"{cursor.producer} ({state}, next item #{cursor.next})")
        return ", ".join(parts)
