"""Leases: how a worker says "I am alive", and how the others decide it is not.

One mechanism for every pattern whose workers can die: a ``shared_queue`` learner, a
pipeline producer or consumer. A lease is one key holding a small record; its holder
rewrites it every ``duration / 3`` seconds from a background thread. Nothing else is
needed: no coordinator, no clock agreement.

Holder side (:class:`Lease`)
    * :meth:`Lease.acquire` creates the key, or, when a record from an earlier holder with
      the same name exists, takes it over with the next *incarnation* number. A record
      that is still being renewed means a live worker already uses that name: acquiring
      raises ``ConfigurationError`` instead of running two workers under one name. It
      watches the record for ``TAKEOVER_FRACTION`` of the holder's duration (logged at
      INFO), past the time the earlier holder may trust its last renewal, then takes over:
      that fences the previous incarnation, which fails at its next renewal and stops.
    * Renewals are compare-and-swap writes (``put_if_match``) where the mailbox supports
      them, so a holder learns at its next renewal that someone else wrote its lease
      (declared it lost, or a newer incarnation took it) and stops with
      :class:`~gradientmail._errors.LeaseLostError`.
    * :meth:`Lease.ensure_fresh` is the fence a holder checks before every action that only
      an owner may take (deliver an item, record a completion). It costs two attribute
      reads while the last successful renewal was sent less than ``SAFE_FRACTION *
      duration`` ago; past that (the process was paused, the store stopped answering) it
      renews synchronously first, and raises ``LeaseLostError`` when that shows the lease
      was lost.

Observer side: :class:`~gradientmail.patterns._lease_watch.LeaseWatcher` (its own module).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from gradientmail._errors import (
    BackendError,
    LeaseLostError,
    OutcomeUnknownError,
)
from gradientmail._record_codec import decode_record
from gradientmail.backends._base import new_write_id
from gradientmail.mailbox import Capability, Mailbox, Version
from gradientmail.patterns._claims import read_versioned
from gradientmail.patterns._lease_record import OwnRecord, lease_record
from gradientmail.patterns._lease_watch import (
    LIVE_STATES,
    LeaseState,
    LeaseWatcher,
    watch_earlier_holder,
)
from gradientmail.patterns._patience import Patient
from gradientmail.patterns._workers import Worker

__all__ = [
    "RENEWALS_PER_LEASE",
    "SAFE_FRACTION",
    "TAKEOVER_FRACTION",
    "Lease",
    "LeaseState",
    "LeaseWatcher",
]

#: A holder renews this many times per lease duration.
RENEWALS_PER_LEASE = 3
#: A holder acts only while its last successful renewal was sent less than this fraction of
#: the duration ago; the rest is margin for clock rates and the time a request takes.
SAFE_FRACTION = 0.75

#: A restart watches its id's lease unchanged this long (of the holder's duration) before
#: taking it over: past ``SAFE_FRACTION``, with a margin for two clocks' rates.
TAKEOVER_FRACTION = SAFE_FRACTION + 0.1

#: Lost and declared-lost leases at WARNING; failed background renewals at DEBUG.
_log = logging.getLogger(__name__)


class Lease:
    """One holder's lease on ``key``, renewed in the background while held.

    Args:
        mailbox: the mailbox holding the lease.
        key: the lease key, e.g. ``leases/node-0``.
        holder: the holder's name, written into the record.
        duration: seconds of unchanged record after which observers declare the holder dead.
        period: seconds between renewals; ``duration / 3`` when ``None``. It is written
            into the record, so that :meth:`acquire` polls an earlier holder's record a few
            times per period while it watches.
        extra: more fields for the record (a ``shared_queue`` learner writes its
            ``epoch``), read back by :meth:`LeaseWatcher.observe`.
        clock: the monotonic seconds by which the holder judges its own freshness
            (``time.monotonic``; tests drive a fake one).

    Thread-safe: renewals run on a background thread, :meth:`ensure_fresh` on any thread.
    """

    def __init__(
        self,
        mailbox: Mailbox,
        key: str,
        holder: str,
        *,
        duration: float,
        period: float | None = None,
        extra: Mapping[str, Any] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.mailbox = mailbox
        self.clock = clock
        self.extra = dict(extra or {})
        self.key = key
        self.holder = holder
        self.duration = float(duration)
        self.period = self.duration / RENEWALS_PER_LEASE if period is None else float(period)
        self.incarnation = 0
        #: the last error a background renewal raised (the next period retries).
        self.renew_error: BaseException | None = None
        self._own = OwnRecord(token=new_write_id())
        self._lock = threading.Lock()  # one renewal at a time
        self._worker: Worker | None = None

    @property
    def renewals(self) -> int:
        """Renewals that succeeded."""
        return self._own.renewals

    @property
    def _cas(self) -> bool:
        return self.mailbox.supports(Capability.COMPARE_AND_SWAP)

    # -- acquiring ----------------------------------------------------------------------------

    def acquire(self, *, patience: float = 0.0) -> None:
        """Create the lease, or take it over from an earlier incarnation with this name.

        Args:
            patience: seconds each request keeps retrying a transient store failure (see
                :class:`~gradientmail.patterns._patience.Patient`): a learner that starts
                during a brief outage waits it out. Renewals never wait: they retry at the
                next period.

        Raises:
            ConfigurationError: another live holder renews this lease (two workers were
                given one name).
            BackendError: the store failed (for longer than ``patience``).
        """
        mailbox = self.mailbox
        if patience > 0:
            what = f"lease {self.key!r} of {self.holder!r}"
            self.mailbox = Patient(mailbox, patience, threading.Event(), what)
        try:
            self._acquire()
        finally:
            self.mailbox = mailbox  # before any renewal: those go to the store itself

    def _acquire(self) -> None:
        while True:
            sent = self.clock()
            try:
                created = self.mailbox.put_if_absent(self.key, self._body(1, "running"))
            except OutcomeUnknownError:
                # The record says whether our create landed: our token, incarnation 1.
                ours, settled = self._settle(1)
                if not ours:
                    continue  # not ours (or not there yet): decide again from what is stored
                self.incarnation = 1
                self._stored(settled, sent)
                return
            if created:
                self.incarnation = 1
                self._stored(self._read_version(), sent)
                return
            current = self._read()
            if current is None:
                continue  # deleted in between: create it again
            record, version = current
            if record.get("state") in LIVE_STATES:
                self._refuse_if_renewed(record, version)
            incarnation = int(record.get("incarnation") or 0) + 1
            sent = self.clock()
            body = self._body(incarnation, "running")
            if self._cas:
                try:
                    new = self.mailbox.put_if_match(self.key, body, version)
                except OutcomeUnknownError:
                    new = self._settle(incarnation)[1]
                if new is None:
                    continue  # it changed while we looked (or our swap did not land): again
            else:
                self.mailbox.put(self.key, body)
                new = None
            self.incarnation = incarnation
            self._stored(new, sent)
            return

    def _refuse_if_renewed(self, record: dict[str, Any], version: Version) -> None:
        """Watch a ``running`` record for ``TAKEOVER_FRACTION`` of its duration; refuse if it
        changes. Its holder acts only within ``SAFE_FRACTION`` of a renewal sent before this
        read, so one that was only paused wakes to a stale lease, fails to renew and stops.
        """
        duration = float(record.get("lease") or self.duration)
        renewed_at = record.get("renewed_at")
        if isinstance(renewed_at, (int, float)) and time.time() - renewed_at > 2 * duration:
            # Not renewed for two whole durations by this host's wall clock: gone. The one
            # place where hosts' clocks must agree (to within a lease); docs say so.
            return
        period = record.get("period")
        if not isinstance(period, (int, float)) or period <= 0:
            period = duration / RENEWALS_PER_LEASE
        window = TAKEOVER_FRACTION * duration
        watch_earlier_holder(self._read, self.holder, self.key, record, version, window, period)

    # -- renewing -----------------------------------------------------------------------------

    def start(self) -> Lease:
        """Start renewing every ``period`` seconds in a background thread."""
        period = self.period

        def loop(stop: threading.Event) -> None:
            while not stop.wait(period):
                try:
                    self.renew()
                    self.renew_error = None
                except LeaseLostError:
                    return
                except BackendError as exc:
                    self.renew_error = exc  # the next period retries; ensure_fresh fences
                    _log.debug("%r could not renew its lease %r: %s", self.holder, self.key, exc)

        self._worker = Worker(f"gradientmail-lease-{self.holder}", loop).start()
        return self

    def renew(self) -> None:
        """Renew now.

        Raises:
            LeaseLostError: someone else wrote the lease (it was declared lost, or a newer
                incarnation took it over).
            BackendError: the store failed; the lease is unchanged.
        """
        with self._lock:
            if self._own.lost is not None:
                raise self._error()
            sent = self.clock()
            self._own.seq += 1
            body = self._body(self.incarnation, "running")
            if not self._cas:
                self.mailbox.put(self.key, body)
                self._stored(None, sent)
                return
            assert self._own.version is not None
            try:
                new = self.mailbox.put_if_match(self.key, body, self._own.version)
            except OutcomeUnknownError:
                # Our renewal may have landed: the record's token and sequence number say.
                new = self._settle(self.incarnation)[1]
                if new is None:
                    raise  # it did not (yet): the lease is as it was, the next renewal retries
            if new is None:
                self._own.lost = self._why_lost()
                _log.warning("%r lost its lease %r: %s", self.holder, self.key, self._own.lost)
                raise self._error()
            self._stored(new, sent)

    def retarget(self, **extra: Any) -> None:
        """Change fields of the record (a learner's open ``epochs``) and renew at once, so
        observers see the change now rather than at the next renewal.

        Raises:
            LeaseLostError: the lease was lost.
            BackendError: the store failed: the next background renewal writes the change.
        """
        with self._lock:
            self.extra = {**self.extra, **extra}
        self.renew()

    def ensure_fresh(self) -> None:
        """Return only while no observer can have declared this holder dead.

        Costs nothing while the last renewal is recent; otherwise renews first.

        Raises:
            LeaseLostError: the lease was lost, or renewing failed while it was stale.
        """
        if self._own.lost is not None:
            raise self._error()
        if self.clock() < self._own.fresh_until:
            return
        try:
            self.renew()
        except BackendError as exc:
            _log.warning(
                "%r could not renew its stale lease %r in time and stops acting: %s",
                self.holder,
                self.key,
                exc,
            )
            raise LeaseLostError(
                f"{self.holder!r} could not renew its lease {self.key!r} in time ({exc}); "
                "it stops rather than risk acting on work another worker may take over",
                learner=self.holder,
            ) from exc

    @property
    def lost(self) -> bool:
        """Whether this holder learnt that its lease was taken."""
        return self._own.lost is not None

    def end(self, state: str = "finished") -> None:
        """Stop renewing and record ``state`` (``finished``, ``released`` or ``failed``).

        A lease that was lost is left as the observer wrote it. Store errors are raised.
        """
        if self._worker is not None:
            self._worker.stop()
        with self._lock:
            if self._own.lost is not None or self.incarnation == 0:
                return
            self._own.seq += 1
            body = self._body(self.incarnation, state)
            if self._cas and self._own.version is not None:
                if self.mailbox.put_if_match(self.key, body, self._own.version) is None:
                    self._own.lost = self._why_lost()
            else:
                self.mailbox.put(self.key, body)

    # -- internals ----------------------------------------------------------------------------

    def _body(self, incarnation: int, state: str) -> bytes:
        return lease_record(
            self.holder,
            incarnation,
            self._own.token,
            self._own.seq,
            state,
            self.duration,
            period=self.period,
            **self.extra,
        )

    def _stored(self, version: Version | None, sent: float) -> None:
        self._own.version = version
        self._own.fresh_until = sent + SAFE_FRACTION * self.duration
        self._own.renewals += 1

    def _read(self) -> tuple[dict[str, Any], Version] | None:
        found = read_versioned(self.mailbox, self.key, self._cas)
        if found is None:
            return None
        data, version = found
        # Without compare-and-swap the bytes stand for the version (a lease carries the
        # time it was written, so every renewal's bytes differ).
        return decode_record(data) or {}, version if version is not None else Version(data.hex())

    def _read_version(self) -> Version | None:
        current = self._read() if self._cas else None
        return None if current is None else current[1]

    def _settle(self, incarnation: int) -> tuple[bool, Version | None]:
        """After an ambiguous write: whether our record is the one stored, and its version
        (``None`` on a store without compare-and-swap).

        Ours means this holder's token, the incarnation written and the sequence number of
        the write just sent: only that write can have stored all three.
        """
        try:
            current = self._read()
        except BackendError:
            return False, None
        if current is None:
            return False, None
        record, version = current
        stored = (record.get("token"), record.get("incarnation"), record.get("seq"))
        if stored != (self._own.token, incarnation, self._own.seq):
            return False, None
        return True, version if self._cas else None

    def _why_lost(self) -> str:
        current = self._read()
        if current is None:
            return "its lease record was deleted"
        record = current[0]
        if record.get("state") == "lost":
            return f"it was declared lost by {record.get('lost_by')!r}"
        if record.get("token") != self._own.token:
            return (
                f"a newer incarnation ({record.get('incarnation')}) with the same id took "
                f"over ({record.get('host')} pid {record.get('pid')})"
            )
        return "its lease record changed"

    def _error(self) -> LeaseLostError:
        return LeaseLostError(
            f"{self.holder!r} lost its lease {self.key!r}: {self._own.lost}; the work it held is "
            "being finished by others",
            learner=self.holder,
        )
