"""A consumer's view of the producers: a cursor each, their end records, and their leases.

:class:`ProducerWatch` holds one :class:`Cursor` per declared producer (the next item to
look at, and the producer's end record once read). While its consumer finds nothing, it
observes the leases of the unfinished producers once per ``heartbeat_interval`` with a
:class:`~gradientmail.patterns._leases.LeaseWatcher`: a registered producer whose lease was
unchanged for ``lease`` seconds (by this consumer's clock) is declared lost with
compare-and-swap on its lease, and then its end record is created with status ``lost``.
It also turns a producer's end record into the error consumers raise.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gradientmail._errors import ProducerFailedError, ProducerLostError
from gradientmail.patterns._claims import create_settled
from gradientmail.patterns._leases import LeaseState, LeaseWatcher
from gradientmail.patterns._workers import CarriedError
from gradientmail.patterns.pipeline._records import PRODUCER_LEASES, End, end_key, exists, item_key

if TYPE_CHECKING:
    from gradientmail.mailbox import Mailbox
    from gradientmail.patterns.pipeline._mailbox_run import MailboxSettings

__all__ = ["Cursor", "ProducerWatch"]

#: A producer declared lost at WARNING.
_log = logging.getLogger(__name__)


@dataclass
class Cursor:
    """One consumer's view of one producer."""

    producer: str
    next: int = 0
    end: End | None = None
    catching_up: bool = True
    #: The producer's lease as last observed (``None`` before the first observation).
    lease: LeaseState | None = None
    checked: float = 0.0

    def exhausted(self) -> bool:
        """Whether the producer ended and every item it counts was passed."""
        return self.end is not None and self.next >= self.end.count


class ProducerWatch:
    """One consumer's cursors over the declared producers, and the watch on their leases.

    Args:
        mailbox: the run's mailbox.
        declared: the declared producer ids.
        settings: the run's timings (``heartbeat_interval``, ``lease``).
        consumer: the consumer's id, written into a ``lost`` end record it creates.
    """

    def __init__(
        self, mailbox: Mailbox, declared: tuple[str, ...], settings: MailboxSettings, consumer: str
    ) -> None:
        self._box = mailbox
        self._settings = settings
        self._consumer = consumer
        self._watcher = LeaseWatcher(mailbox, PRODUCER_LEASES, duration=settings.lease)
        now = time.monotonic()  # the consumer's start, on the clock of its polls
        self.cursors = [Cursor(p, checked=now) for p in declared]

    def exhausted(self) -> bool:
        """Whether every producer ended and every item was passed."""
        return all(c.exhausted() for c in self.cursors)

    def failed(self) -> tuple[str, End] | None:
        """A producer that ended ``failed`` or ``lost`` and whose items were all passed."""
        for cursor in self.cursors:
            if cursor.exhausted() and cursor.end is not None and cursor.end.status != "done":
                return cursor.producer, cursor.end
        return None

    def failure(self, producer: str, end: End) -> ProducerFailedError:
        """The error consumers raise for ``producer``'s ``failed`` or ``lost`` end."""
        if end.status == "lost":
            return ProducerLostError(
                f"producer {producer!r} was lost after putting {end.count} item(s): its "
                f"lease was not renewed for over {self._settings.lease}s (declared by "
                f"{end.by}); did its process die?",
                producer=producer,
                items=end.count,
            )
        carried = end.error or CarriedError.from_record(None)
        return ProducerFailedError.after(
            producer, end.count, carried.type_name, carried.message, carried.traceback_text
        )

    def watch(self, now: float) -> None:
        """While idle: declare lost the producers whose lease stopped being renewed."""
        for cursor in self.cursors:
            if cursor.end is not None or now - cursor.checked < self._settings.heartbeat_interval:
                continue
            cursor.checked = now
            cursor.lease = observed = self._watcher.observe(cursor.producer)
            if observed.state == "missing":
                continue  # not registered yet: only stall_timeout applies
            if self._watcher.declare_if_dead(observed, self._consumer):
                self._end_lost(cursor)

    def _end_lost(self, cursor: Cursor) -> None:
        """Create the end record of a producer whose lease this consumer declared lost.

        The lease was swapped to ``lost`` first, so the producer stops at its next renewal
        or item; the count is the items stored by then. If the producer wrote its own end
        meanwhile, that one stands (whoever creates the record first decides).
        """
        producer = cursor.producer
        count = cursor.next
        while exists(self._box, item_key(producer, count)):
            count += 1
        silent = self._settings.lease
        lost = End("lost", count=count, by=self._consumer, token=None, silent_s=silent).to_bytes()
        if create_settled(self._box, end_key(producer), lost, lambda stored: stored == lost):
            _log.warning(
                "consumer %r declared producer %r lost after %d item(s): its lease was not "
                "renewed for %.1fs",
                self._consumer,
                producer,
                count,
                silent,
            )
        cursor.end = End.read(self._box, end_key(producer))

    def describe_unfinished(self) -> str:
        """The producers without an end record, for a stall message."""
        parts = []
        for cursor in self.cursors:
            if cursor.end is not None:
                continue
            lease = cursor.lease
            registered = lease is not None and lease.state != "missing"
            state = "registered, renewing its lease" if registered else "not registered"
            parts.append(f"{cursor.producer} ({state}, next item #{cursor.next})")
        return ", ".join(parts)
