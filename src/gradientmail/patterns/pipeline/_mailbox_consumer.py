"""A consumer over a mailbox: a prefetch thread claims items round robin, exactly once.

The consumer holds a :class:`~gradientmail.patterns._leases.Lease` at
``leases/consumers/{id}`` while it is open, and keeps a cursor per producer. Its prefetch
thread (a :class:`~gradientmail.patterns._workers.Worker`) visits producers in turn, reads the
next item, claims it (:class:`~gradientmail.patterns.pipeline._item_claims.ItemClaims`:
``put_if_absent``, then a read-back), applies ``decode`` and hands it to the loop through a
:class:`~gradientmail.patterns._workers.HandoffBuffer` of ``prefetch`` items. An error
travels through the same buffer, after the items before it. ``next()`` checks the lease
(:meth:`~gradientmail.patterns._leases.Lease.ensure_fresh`) before returning an item, and
then swaps the item's claim to ``delivered`` in the background
(:class:`~gradientmail.patterns.pipeline._deliveries.DeliveryRecorder`); it returns the
next item only once that record has landed. A consumer paused past its lease raises
``LeaseLostError`` instead of returning an item.

Claims of other consumers that the cursors pass undelivered are noted
(:class:`~gradientmail.patterns.pipeline._takeover.Undelivered`). While it finds nothing
new, the thread takes over those whose owner died, watches the producers' leases
(:class:`~gradientmail.patterns.pipeline._producer_watch.ProducerWatch`), and polls with a
:class:`~gradientmail.patterns._workers.Backoff`. The consumer stops when every declared
producer has an end record, its cursor has reached that record's count, and every item it
noted was delivered by its owner or taken over.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from gradientmail._errors import (
    BackendError,
    ConfigurationError,
    KeyNotFoundError,
    LeaseLostError,
    PipelineAbortedError,
    PipelineError,
    PipelineStalledError,
)
from gradientmail.mailbox import Mailbox
from gradientmail.patterns._claims import create_settled
from gradientmail.patterns._hash_ring import point
from gradientmail.patterns._leases import LeaseWatcher
from gradientmail.patterns._patience import Patient
from gradientmail.patterns._workers import Backoff, CarriedError, HandoffBuffer, Worker
from gradientmail.patterns.pipeline._deliveries import DeliveryRecorder
from gradientmail.patterns.pipeline._item_claims import HeldItem, ItemClaims
from gradientmail.patterns.pipeline._producer_watch import Cursor, ProducerWatch
from gradientmail.patterns.pipeline._records import (
    ABORTED_KEY,
    CONSUMER_LEASES,
    Aborted,
    End,
    consumer_lease_key,
    end_key,
    item_key,
)
from gradientmail.patterns.pipeline._roles import Consumer, Decode
from gradientmail.patterns.pipeline._stats import ConsumerStats
from gradientmail.patterns.pipeline._takeover import Undelivered

if TYPE_CHECKING:
    from gradientmail.patterns.pipeline._mailbox_run import MailboxRun

__all__ = ["MailboxConsumer"]

_log = logging.getLogger(__name__)


_END = object()


class _Item:
    """A decoded item in the prefetch buffer, with its claim; or the error decoding it."""

    __slots__ = ("error", "held", "value")

    def __init__(self, value: Any, held: HeldItem, error: CarriedError | None = None) -> None:
        self.value = value
        self.held = held
        self.error = error


class MailboxConsumer(Consumer[Any]):
    """A consumer of one mailbox run (see the module docstring)."""

    def __init__(self, core: MailboxRun, consumer_id: str, decode: Decode | None) -> None:
        super().__init__(consumer_id, ConsumerStats())
        self._core = core
        self._decode = decode
        self._buffer: HandoffBuffer[Any] = HandoffBuffer(core.settings.prefetch)
        self._done = False
        settings = core.settings
        self._lease = core.lease(consumer_lease_key(consumer_id), consumer_id)
        try:
            self._lease.acquire(patience=settings.lease)  # an outage at start is waited out
        except ConfigurationError as exc:
            raise ConfigurationError(
                f"consumer id {consumer_id!r} is in use by a live consumer of the pipeline in "
                f"{core.mailbox.url} (it renews its lease {self._lease.key!r}); give each open "
                "consumer its own id, or leave consumer_id unset for a unique default"
            ) from exc
        self._lease.start()
        self._lease_ended = False
        self._worker = Worker(f"gradientmail-consumer-{consumer_id}", self._run)
        # The prefetch thread and the delivery recorder ride out a store outage shorter
        # than the lease; the lease renews on its own schedule with the mailbox itself.
        what = f"pipeline consumer {consumer_id!r}"
        box = Patient(core.mailbox, settings.lease, self._worker.stop_event, what)
        self._claims = ItemClaims(box, consumer_id, self._lease.incarnation)
        self._deliveries = DeliveryRecorder(
            self._claims, self.stats, f"gradientmail-deliveries-{consumer_id}"
        )
        self._undelivered = Undelivered(
            self._claims,
            LeaseWatcher(box, CONSUMER_LEASES, duration=settings.lease),
            settings.heartbeat_interval,
        )
        self._producers = ProducerWatch(box, core.declared, settings, consumer_id)
        # Consumers start their round robin at different producers, so they collide less.
        self._turn = point(consumer_id) % len(core.declared)
        self._worker.start()

    @property
    def _box(self) -> Mailbox:
        """The run's mailbox, behind the patience of the prefetch thread and the recorder."""
        return self._claims.mailbox

    # -- the consumer's side ------------------------------------------------------------

    def __next__(self) -> Any:
        if self._done:
            raise StopIteration
        entry, waited = self._buffer.get()
        self.stats.wait_s += waited
        self.stats.waits.add(waited)
        try:
            self._deliveries.wait()  # the item returned before this one is recorded
        except BaseException:
            self._fail()
            raise
        if entry is _END:
            self._stop("finished")
            raise StopIteration
        if isinstance(entry, (PipelineError, LeaseLostError)):
            self._fail()
            raise entry
        if isinstance(entry, CarriedError):
            self._fail()
            entry.reraise(f"the prefetch thread of pipeline consumer {self.id!r}")
        assert isinstance(entry, _Item)
        if entry.error is not None:
            self._deliveries.record(entry.held, failed=True)  # raised in the item's place
            self._fail()
            entry.error.reraise(f"the prefetch thread of pipeline consumer {self.id!r}")
        try:
            # No one can take this item over for at least a quarter of the lease after
            # this, far longer than recording its delivery takes.
            self._lease.ensure_fresh()
        except LeaseLostError:
            self._fail()
            raise
        self._deliveries.record(entry.held)
        self.stats.items += 1
        return entry.value

    def close(self) -> None:
        """Stop taking items; hand the items claimed and not returned to the others.

        The lease ends ``released``, so other consumers take those items over at once.
        """
        self._stop("released")

    def _fail(self) -> None:
        """Stop as ``failed`` just before an error is raised. A store error while ending the
        lease is logged, never raised in that error's place: observers then see the lease
        go silent and take its items over, as after a crash."""
        try:
            self._stop("failed")
        except BackendError as exc:
            _log.warning(
                "pipeline consumer %r could not record that it stopped (%s); its lease will "
                "expire instead",
                self.id,
                exc,
            )

    def _stop(self, state: str) -> None:
        """Stop the threads, let the last delivery record land, then end the lease.

        Raises:
            LeaseLostError: the last item's record lost to a takeover (see ``next()``).
            BackendError: that record, or ending the lease, failed.
        """
        self._done = True
        self._buffer.close()  # wakes the prefetch thread if it waits for room
        self._worker.stop()
        error = self._deliveries.close()
        if not self._lease_ended:
            self._lease_ended = True
            self._lease.end(state if error is None else "failed")
        if error is not None:
            raise error

    # -- the prefetch thread ------------------------------------------------------------

    def _run(self, stop: threading.Event) -> None:
        try:
            self._loop(stop)
        except (PipelineError, LeaseLostError) as exc:
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
            self._lease.ensure_fresh()  # claiming is an owner's act: never while fenced
            taken = self._take_one(stop)
            exhausted = self._producers.exhausted()
            if taken is None and self._undelivered:
                taken = self._take_over(at_end=exhausted)
            if taken is not None:
                if not self._hand_over(*taken):
                    return
                backoff.reset()
                searching_since = time.perf_counter()
            failed = self._producers.failed()
            if failed is not None:
                # Every item of this producer is claimed, ours already handed over.
                producer, end = failed
                reason = f"producer {producer!r} ended {end.status}"
                aborted = Aborted(reason, producer=producer).to_bytes()
                create_settled(self._box, ABORTED_KEY, aborted)
                raise self._producers.failure(producer, end)
            if taken is not None:
                continue
            if exhausted and not self._undelivered:
                self._buffer.put_control(_END)
                return
            self._producers.watch(time.monotonic())
            waited = time.perf_counter() - searching_since
            if stall is not None and waited > stall:
                raise PipelineStalledError(
                    f"consumer {self.id!r} found no item for {waited:.1f}s; "
                    f"{self._describe_waits()}"
                )
            stop.wait(backoff.next())

    def _hand_over(self, data: bytes, held: HeldItem) -> bool:
        """Decode and buffer one claimed item; ``False`` if the consumer was closed.

        A decode error takes the item's place in the buffer, and ends the thread.
        """
        try:
            value = data if self._decode is None else self._decode(data)
        except Exception as exc:  # noqa: BLE001 - next() raises it in the item's place
            self._buffer.put(_Item(None, held, CarriedError.of(exc)))
            return False
        return self._buffer.put(_Item(value, held))

    def _take_over(self, *, at_end: bool) -> tuple[bytes, HeldItem] | None:
        """Take over one item a dead consumer had claimed and not delivered, and read it."""
        held = self._undelivered.take_one(time.monotonic(), at_end=at_end)
        if held is None:
            return None
        self.stats.taken_over += 1
        return self._box.get(item_key(held.producer, held.seq)), held

    def _take_one(self, stop: threading.Event) -> tuple[bytes, HeldItem] | None:
        """Claim and read the next available item from any producer, round robin."""
        cursors = self._producers.cursors
        count = len(cursors)
        for offset in range(count):
            cursor = cursors[(self._turn + offset) % count]
            taken = self._take_from(cursor)
            if taken is not None:
                self._turn = (self._turn + offset + 1) % count
                return taken
            if stop.is_set():
                return None
        return None

    def _take_from(self, cursor: Cursor) -> tuple[bytes, HeldItem] | None:
        box = self._box
        producer = cursor.producer
        while not cursor.exhausted():
            seq = cursor.next
            if cursor.catching_up:
                # Behind other consumers (at start, or after losing a claim): skip items
                # already claimed without reading them, noting those not yet delivered.
                current = self._claims.read(producer, seq)
                if current is not None:
                    self._undelivered.note(producer, seq, current[0])
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
            held = self._claims.claim(producer, seq)
            if held is not None:
                cursor.next += 1
                return data, held
            # Another consumer is reading this producer too: catch up by reading claims
            # (this one first, to note its owner), and let the caller try the next producer
            # rather than race on this one.
            self.stats.claims_lost += 1
            cursor.catching_up = True
            return None
        return None

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
                raise self._producers.failure(producer, end)
        raise PipelineAbortedError(f"the pipeline was aborted: {aborted.reason}")

    def _describe_waits(self) -> str:
        unfinished = self._producers.describe_unfinished()
        waits = f"producers not finished: {unfinished}" if unfinished else ""
        if self._undelivered:
            undelivered = self._undelivered.describe()
            waits += "; " if waits else ""
            waits += f"items other consumers claimed and have not returned: {undelivered}"
        return waits
