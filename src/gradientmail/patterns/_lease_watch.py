"""The observer side of a lease: :class:`LeaseWatcher` (see :mod:`gradientmail.patterns._leases`).

An observer declares a holder dead only after seeing its lease record unchanged for the
lease's duration by its own monotonic clock, and then declares it lost with one
compare-and-swap, so exactly one observer wins and the holder's next renewal fails.

Observer side (:class:`LeaseWatcher`)
    * An observer declares a holder dead only after seeing its lease record *unchanged* for
      ``duration`` seconds by its own monotonic clock. A renewal sent at time ``t`` is seen
      by every later read, so no observer can declare the holder dead before ``t +
      duration``, while the holder stops acting at ``t + SAFE_FRACTION * duration``: host
      clocks need not agree, only run at about the same rate.
    * :meth:`LeaseWatcher.declare_lost` writes the ``lost`` state with compare-and-swap
      against the version it watched, so it fails if the holder renewed in between, and
      exactly one observer declares. Only then may others take the holder's work.

Cost: one write per holder per ``duration / 3`` (per worker, not per unit of work), and one
read per watched lease per observation.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gradientmail._errors import ConfigurationError
from gradientmail._record_codec import decode_record, encode_record
from gradientmail.mailbox import Capability, Mailbox, Version
from gradientmail.patterns._claims import read_versioned

__all__ = ["LIVE_STATES", "LeaseState", "LeaseWatcher", "watch_earlier_holder"]

#: Lost leases declared, at WARNING (the holder side logs on the leases logger).
_log = logging.getLogger("gradientmail.patterns._leases")


#: States a lease record can be in. ``running`` is the only live one.
LIVE_STATES = frozenset({"running"})


@dataclass(frozen=True)
class LeaseState:
    """What an observer concluded about one holder's lease."""

    holder: str
    #: ``running``, ``finished``, ``released``, ``failed``, ``lost`` or ``missing``.
    state: str
    #: The incarnation whose record was read (0 when missing).
    incarnation: int
    #: ``True`` when the holder is not running: it ended, was declared lost, or its record
    #: was unchanged (or missing) for a whole duration of this observer's clock.
    dead: bool
    #: The ``epoch`` its record names (a ``shared_queue`` learner's oldest open one), or
    #: ``None``.
    epoch: int | None = None
    #: Every epoch its record says it works in (a learner whose epochs flow can have two
    #: open); empty when the record names none.
    epochs: frozenset[int] = frozenset()

    def works_in(self, epoch: int) -> bool:
        """Whether the record says its holder works in ``epoch`` (any, when it names none)."""
        if self.epochs:
            return epoch in self.epochs
        return self.epoch is None or self.epoch == epoch


class LeaseWatcher:
    """An observer of other holders' leases under ``prefix`` (``prefix + holder``).

    Call :meth:`observe` at intervals; a holder is dead once its record was unchanged for
    the duration its record states (``duration`` when it states none) by this watcher's
    ``clock`` (``time.monotonic``), or says it ended or was lost.
    """

    def __init__(
        self,
        mailbox: Mailbox,
        prefix: str,
        *,
        duration: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.mailbox = mailbox
        self.clock = clock
        self.prefix = prefix
        self.duration = float(duration)
        self._seen: dict[str, tuple[object, float, Version | None]] = {}
        self._cas = mailbox.supports(Capability.COMPARE_AND_SWAP)
        #: lease reads made.
        self.reads = 0

    def observe(self, holder: str) -> LeaseState:
        """Read ``holder``'s lease once and say whether it is dead."""
        self.reads += 1
        now = self.clock()
        found = read_versioned(self.mailbox, self.prefix + holder, self._cas)
        data, version = found or (b"", None)
        # What tells one write from the next: the version, or the bytes without one.
        mark: object = None if found is None else data if version is None else version.token
        record = decode_record(data) or {} if data else {}
        seen = self._seen.get(holder)
        if seen is None or seen[0] != mark:
            self._seen[holder] = (mark, now, version)
            since = now
        else:
            since = seen[1]
        state = str(record.get("state") or "missing") if data else "missing"
        duration = float(record.get("lease") or self.duration)
        unchanged_long = now - since >= duration
        dead = (state not in LIVE_STATES and state != "missing") or unchanged_long
        epoch = record.get("epoch")
        epochs = record.get("epochs")
        return LeaseState(
            holder,
            state,
            int(record.get("incarnation") or 0),
            dead,
            epoch if _is_int(epoch) else None,
            frozenset(e for e in epochs if _is_int(e)) if isinstance(epochs, list) else frozenset(),
        )

    def declare_if_dead(self, observed: LeaseState, by: str) -> bool:
        """Whether the holder :meth:`observe` found dead is gone for good: declared lost by
        this call, or its lease already says it ended (see :meth:`declare_lost`)."""
        return observed.dead and self.declare_lost(observed.holder, by)

    def declare_lost(self, holder: str, by: str) -> bool:
        """Mark ``holder``'s lease lost, if it is still the record this watcher saw.

        Returns ``True`` when this call wrote ``lost`` (exactly one observer does), or the
        lease already says the holder ended or was lost (another observer may have declared
        it between this call's read and its swap); ``False`` when it was renewed in between
        (the holder is alive after all).
        """
        seen = self._seen.get(holder)
        if seen is None:
            return False
        version = seen[2]
        if version is None:
            return True  # no record, or no compare-and-swap: nothing to fence with
        key = self.prefix + holder
        try:
            data, current = self.mailbox.get_versioned(key)
        except LookupError:
            return True
        record = decode_record(data) or {}
        if record.get("state") not in LIVE_STATES:
            return True  # it ended, or another observer declared it first
        if current != version:
            return False  # renewed since we watched: alive
        record.update(state="lost", lost_by=by, lost_at=time.time())
        declared = self.mailbox.put_if_match(key, encode_record(record), version) is not None
        if not declared:
            # Renewed, or another observer declared it first: only the record can tell.
            try:
                data = self.mailbox.get(key)
            except LookupError:
                return True
            return (decode_record(data) or {}).get("state") not in LIVE_STATES
        _log.warning(
            "%r declared %r lost: its lease %r was not renewed for %.1fs",
            by,
            holder,
            key,
            self.clock() - seen[1],
        )
        return True


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


#: Said when the holder a restart waits for ends while it waits: maybe a twin.
_TWIN_ENDED = (
    "%r found another process with its id (%s) running, which ended (%s) while this one "
    "waited; this one goes on under the id. If that was not this learner's earlier "
    "incarnation, two processes share one id: give each its own"
)


def watch_earlier_holder(
    read: Callable[[], tuple[dict[str, Any], Version] | None],
    holder: str,
    key: str,
    record: dict[str, Any],
    version: Version,
    window: float,
    period: float,
) -> None:
    """Watch a ``running`` lease record, read as ``(record, version)``, for ``window``
    seconds before a restart named ``holder`` takes it over; return when it may.

    Raises:
        ConfigurationError: the record was renewed meanwhile: a live process has this id.
    """
    where = f"{record.get('host')} pid {record.get('pid')}"
    _log.info(
        "%r waits up to %.1f s for its earlier incarnation (%s) to renew lease %r or to go "
        "silent; it takes the lease over then",
        holder,
        window,
        where,
        key,
    )
    # Real time, not a lease's clock: this wait paces real sleeps (a fake clock never ends it).
    deadline = time.monotonic() + window
    pause = max(0.02, min(period / 4, window / 12))
    while time.monotonic() < deadline:
        time.sleep(pause)  # a polling period while watching another holder's record
        current = read()
        if current is not None and current[1] == version:
            continue  # unchanged
        if current is not None and current[0].get("state") not in LIVE_STATES:
            # Alive when we began: a restart racing its own shutdown, or two processes given
            # one id. Go on, but loudly: silently, this one would train what is left.
            _log.warning(_TWIN_ENDED, holder, where, current[0].get("state"))
            return
        raise ConfigurationError(
            f"{holder!r} is already running in this run ({where}) and renews its lease "
            f"{key!r}; give every learner its own id (for example gradientmail.learner ids "
            "built from the launcher's RANK)"
        )
