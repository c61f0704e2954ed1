"""A consumer over a mailbox: a prefetch thread claims items round robin, exactly once.

The consumer keeps a cursor per producer. Its prefetch thread (a
:class:`~gradientmail.patterns.workers.Worker`) visits producers in turn, reads the next
item, claims it with :func:`~gradientmail.patterns.claims.claim` (``put_if_absent``, then a
read-back), applies ``decode`` and hands it to the loop through a
:class:`~gradientmail.patterns.workers.HandoffBuffer` of ``prefetch`` items. An error
travels through the same buffer, after the items before it. The consumer stops when every
declared producer has an end record and its cursor has reached that record's count.

While it finds nothing, the thread polls with a :class:`~gradientmail.patterns.workers.Backoff`
and, once per ``heartbeat_interval``, observes the leases of the unfinished producers with a
:class:`~gradientmail.patterns.leases.LeaseWatcher`: a registered producer whose lease was
unchanged for ``lease`` seconds (by this consumer's clock) is declared lost with
compare-and-swap on its lease, and then its end record is created with status ``lost``.
"""

from __future__ import annotations

import threading
import time
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gradientmail.errors import (
    KeyNotFoundError,
    PipelineAbortedError,
    PipelineError,
    PipelineStalledError,
    ProducerFailedError,
    ProducerLostError,
)
from gradientmail.patterns.claims import claim
from gradientmail.patterns.leases import LeaseState, LeaseWatcher
from gradientmail.patterns.pipeline.api import Consumer, Decode
from gradientmail.patterns.pipeline.records import (
    ABORTED_KEY,
    PRODUCER_LEASES,
    Aborted,
    End,
    claim_key,
    end_key,
    exists,
    item_key,
)
from gradientmail.patterns.pipeline.stats import ConsumerStats
from gradientmail.patterns.workers import Backoff, CarriedError, HandoffBuffer, Worker

if TYPE_CHECKING:
    from gradientmail.patterns.pipeline.over_mailbox import MailboxTransport

__all__ = ["MailboxConsumer"]


@dataclass
class _Cursor:
    """One consumer's view of one producer."""

    producer: str
    next: int = 0
    end: End | None = None
    catching_up: bool = True
    #: The producer's lease as last observed (``None`` before the first observation).
    lease: LeaseState | None = None
    checked: float = 0.0

    def exhausted(self) -> bool:
        return self.end is not None and self.next >= self.end.count


_END = object()


class _Item:
    """A decoded item in the prefetch buffer (so that no item is mistaken for a marker)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


class MailboxConsumer(Consumer[Any]):
    """A consumer of one mailbox run (see the module docstring)."""

    def __init__(self, core: MailboxTransport, consumer_id: str, decode: Decode | None) -> None:
        super().__init__(consumer_id, ConsumerStats())
        self._core = core
        self._box = core.mailbox
        self._decode = decode
        self._buffer: HandoffBuffer[Any] = HandoffBuffer(core.settings.prefetch)
        self._done = False
        now = time.monotonic()
        self._cursors = [_Cursor(p, checked=now) for p in core.declared]
        self._producers = LeaseWatcher(self._box, PRODUCER_LEASES, duration=core.settings.lease)
        # Consumers start their round robin at different producers, so they collide less.
        self._turn = zlib.crc32(consumer_id.encode("utf-8")) % len(self._cursors)
        self._worker = Worker(f"gradientmail-consumer-{consumer_id}", self._run)
        self._worker.start()

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
        self._buffer.close()  # wakes the prefetch thread if it waits for room
        self._worker.stop()

    # -- the prefetch thread ------------------------------------------------------------

    def _run(self, stop: threading.Event) -> None:
        try:
            self._loop(stop)
        except PipelineError as exc:
            self._buffer.put_control(exc)
        except BaseException as exc:  # noqa: BLE001 - every failure must reach the consumer
            self._buffer.put_control(CarriedError.of(exc))

    def _loop(self, stop: threading.Event) -> None:
        core = self._core
        stall = core.settings.stall_timeout
        backoff = Backoff(core.settings.poll_interval)
        searching_since = time.perf_counter()
        aborted_checked = time.monotonic()
        while not stop.is_set():
            if time.monotonic() - aborted_checked >= core.settings.heartbeat_interval:
                aborted_checked = time.monotonic()
                self._check_aborted()
            # Claim nothing while the consumer already holds `prefetch` items.
            held = time.perf_counter()
            if not self._buffer.wait_for_room():
                return
            searching_since += time.perf_counter() - held  # a full buffer is not a stall
            data = self._take_one(stop)
            if data is not None:
                value = data if self._decode is None else self._decode(data)
                if not self._buffer.put(_Item(value)):
                    return
                backoff.reset()
                searching_since = time.perf_counter()
            for cursor in self._cursors:
                if cursor.exhausted() and cursor.end is not None and cursor.end.status != "done":
                    # Every item of this producer is claimed, ours already handed over.
                    reason = f"producer {cursor.producer!r} ended {cursor.end.status}"
                    self._box.put_if_absent(
                        ABORTED_KEY, Aborted(reason, producer=cursor.producer).to_bytes()
                    )
                    raise self._failure(cursor.producer, cursor.end)
            if data is not None:
                continue
            if all(c.exhausted() for c in self._cursors):
                self._buffer.put_control(_END)
                return
            self._watch(time.monotonic())
            waited = time.perf_counter() - searching_since
            if stall is not None and waited > stall:
                raise PipelineStalledError(
                    f"consumer {self.id!r} found no item for {waited:.1f}s; producers not "
                    f"finished: {self._describe_unfinished()}"
                )
            stop.wait(backoff.next())

    def _take_one(self, stop: threading.Event) -> bytes | None:
        """Claim and read the next available item from any producer, round robin."""
        count = len(self._cursors)
        for offset in range(count):
            cursor = self._cursors[(self._turn + offset) % count]
            data = self._take_from(cursor)
            if data is not None:
                self._turn = (self._turn + offset + 1) % count
                return data
            if stop.is_set():
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
                if exists(box, claim_key(producer, seq)):
                    cursor.next += 1
                    continue
                cursor.catching_up = False
            try:
                data = box.get(item_key(producer, seq))
            except KeyNotFoundError:
                if cursor.end is not None:
                    # The end record promises this item; an item never disappears.
                    raise PipelineError(
                        f"item #{seq} of producer {producer!r} is missing although its end "
                        f"record counts {cursor.end.count} items; was the mailbox edited?"
                    ) from None
                cursor.end = End.read(box, end_key(producer))
                if cursor.end is None:
                    return None
                continue  # the end arrived: the item exists now, or the producer is exhausted
            if claim(box, claim_key(producer, seq), self.id):
                cursor.next += 1
                return data
            # Another consumer is reading this producer too: skip ahead without reading,
            # and let the caller try the next producer rather than race on this one.
            self.stats.claims_lost += 1
            cursor.next += 1
            cursor.catching_up = True
            return None
        return None

    def _failure(self, producer: str, end: End) -> ProducerFailedError:
        if end.status == "lost":
            return ProducerLostError(
                f"producer {producer!r} was lost after putting {end.count} item(s): its "
                f"lease was not renewed for over {self._core.settings.lease}s (declared by "
                f"{end.by}); did its process die?",
                producer=producer,
                items=end.count,
            )
        carried = end.error or CarriedError.from_record(None)
        return ProducerFailedError.after(
            producer, end.count, carried.type_name, carried.message, carried.traceback_text
        )

    def _watch(self, now: float) -> None:
        """While idle: declare lost the producers whose lease stopped being renewed."""
        settings = self._core.settings
        for cursor in self._cursors:
            if cursor.end is not None or now - cursor.checked < settings.heartbeat_interval:
                continue
            cursor.checked = now
            cursor.lease = observed = self._producers.observe(cursor.producer)
            if observed.state == "missing":
                continue  # not registered yet: only stall_timeout applies
            if observed.dead and self._producers.declare_lost(cursor.producer, self.id):
                self._declare_lost(cursor)

    def _check_aborted(self) -> None:
        """Raise if the pipeline was aborted, or failed through another consumer."""
        aborted = self._core.aborted()
        if aborted is None:
            return
        producer = aborted.producer
        if producer is not None and producer in self._core.declared:
            end = End.read(self._box, end_key(producer))
            if end is not None and end.status != "done":
                # Another consumer reached a failed producer: fail the same way.
                raise self._failure(producer, end)
        raise PipelineAbortedError(f"the pipeline was aborted: {aborted.reason}")

    def _declare_lost(self, cursor: _Cursor) -> None:
        """Create the end record of a producer whose lease this consumer declared lost.

        The lease was swapped to ``lost`` first, so the producer stops at its next renewal
        or item; the count is the items stored by then. If the producer wrote its own end
        meanwhile, that one stands (whoever creates the record first decides).
        """
        producer = cursor.producer
        count = cursor.next
        while exists(self._box, item_key(producer, count)):
            count += 1
        silent = self._core.settings.lease
        lost = End("lost", count=count, by=self.id, token=None, silent_s=silent)
        self._box.put_if_absent(end_key(producer), lost.to_bytes())
        cursor.end = End.read(self._box, end_key(producer))

    def _describe_unfinished(self) -> str:
        parts = []
        for cursor in self._cursors:
            if cursor.end is not None:
                continue
            lease = cursor.lease
            registered = lease is not None and lease.state != "missing"
            state = "registered, renewing its lease" if registered else "not registered"
            parts.append(f"{cursor.producer} ({state}, next item #{cursor.next})")
        return ", ".join(parts)
