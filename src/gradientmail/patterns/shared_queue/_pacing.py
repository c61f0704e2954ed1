"""When a learner with nothing free looks again: its polls' pace and the end's clocks.

A waiting learner does the expensive part of waiting (a page of claims, the idle markers,
the watched leases) on a backoff that doubles up to one renewal period, but between two of
those it reads the epoch's one ``complete`` record every :data:`NOTICE_S` seconds (one
GET), so it notices the end within about a second and a round trip whatever the lease.

One :class:`Pacing` per epoch is shared by two siblings: the waiting
(:mod:`~gradientmail.patterns.shared_queue._waiting`) asks it whether a full poll is due
and pauses on it; the takeovers (:mod:`~gradientmail.patterns.shared_queue._takeover`) tell
it when the claims or the completions changed under them, so that the next poll comes
soon and the end is confirmed again at once.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from gradientmail.patterns._workers import Backoff
from gradientmail.patterns.shared_queue._idle_markers import POLLS_PER_SECOND

__all__ = ["NOTICE_S", "Pacing", "Quiet"]

#: The longest a waiting learner goes without reading the epoch's ``complete`` record.
NOTICE_S = 1.0


@dataclass
class Quiet:
    """The end-of-epoch clocks (monotonic seconds)."""

    #: Since when nobody seemed busy; ``None`` while someone is.
    since: float | None = None
    #: When a listing of ``done/`` last failed to show every unit.
    confirmed_at: float = float("-inf")


class Pacing:
    """When one learner's next full poll of an epoch is due, and the pause until then.

    Args:
        period: the lease renewal period: the longest gap between two full polls.
        closing: set when the queue closes; a pause ends at once then.

    Guarantees: a pause never lasts longer than :data:`NOTICE_S`, nor past the next full
    poll; after :meth:`changed` the next full poll comes after the shortest delay.
    """

    def __init__(self, period: float, closing: threading.Event) -> None:
        # While waiting, poll again after 100 ms, doubling up to one renewal period, and
        # soon again whenever the idle markers changed (another learner ran out of work): a
        # learner near the end notices it soon, one waiting long costs a small page per
        # period. Each poll lists every marker, so the shortest delay grows with them.
        self.backoff = Backoff(period, floor=min(0.1, period))
        self.quiet = Quiet(confirmed_at=-period)
        self._closing = closing
        #: When (monotonic) the next full poll is due; until then a step reads ``complete``.
        self._poll_at = float("-inf")

    def changed(self) -> None:
        """Claims or completions changed: poll soon, and confirm the end again at once."""
        self.backoff.reset()
        self.quiet.confirmed_at = float("-inf")

    def poll_due(self) -> bool:
        """Whether the next full poll is due (else one read of ``complete`` will do)."""
        return time.monotonic() >= self._poll_at

    def poll_at_once(self) -> None:
        """Busy again, or done: the next wait polls at once."""
        self._poll_at = float("-inf")

    def polled(self, markers: int, changed: bool) -> None:
        """A full poll listed ``markers`` idle markers (``changed``: another set than before)."""
        # All waiting learners together poll about POLLS_PER_SECOND times a second at
        # most: a poll lists every marker, so at 1,024 learners a fixed 100 ms would list a
        # million keys a second. A learner then notices the end within about
        # markers / POLLS_PER_SECOND seconds (0.5 s at 128 learners, 4 s at 1,024).
        backoff = self.backoff
        floor = min(0.1, backoff.ceiling)
        backoff.floor = min(backoff.ceiling, max(floor, markers / POLLS_PER_SECOND))
        if changed:
            backoff.reset()

    def pause(self) -> None:
        """Wait until the next full poll is due, or :data:`NOTICE_S` (or the queue closes)."""
        now = time.monotonic()
        if now >= self._poll_at:
            self._poll_at = now + self.backoff.next()
        self._closing.wait(min(NOTICE_S, self._poll_at - now))  # a polling period, not a sync
