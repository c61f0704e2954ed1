"""What every read of a shared model's head is checked against: a head never goes back, and
the writers' clocks agree with this learner's.

No I/O and no clock of its own: the store hands :meth:`HeadWatch.seen` each head it read,
with this learner's wall-clock time when the read began and when it ended.

**Going back.** On a store that keeps its promise a head read later is never older than
one read before. A head whose version is lower than the highest this reader saw was
restored from an older copy, or rewritten: it is refused.

**Clocks.** Active learners are counted by the writers' clocks (an entry's last exchange
within ``active_window`` seconds), so a learner whose clock is far off changes the outer
step without a word. A head records its writer's time ``w``. It was written after this
reader last saw an older version (at ``began`` of that read, or later) and before the read
that returned it ended, so the writer's clock is off by at least ``w - ended`` (ahead) or
``began_before - w`` (behind). When either exceeds a quarter of the window, this learner
warns, once.
"""

from __future__ import annotations

import logging

from gradientmail._errors import InvalidDataError
from gradientmail._exchange.layout import Head, start_over

__all__ = ["HeadWatch"]

log = logging.getLogger("gradientmail.exchange")

#: The part of the activity window by which two clocks may differ before a warning.
SKEW_FRACTION = 0.25


class HeadWatch:
    """The checks of one reader's heads (one learner, or one ``load_shared``).

    Args:
        key: the head's key, for the messages.
        learner: this learner's id (``None``: a reader, whose clock is not checked).
        window: the activity window, seconds.
    """

    def __init__(self, key: str, learner: str | None = None, window: float = 0.0) -> None:
        self.key = key
        self.learner = learner
        self.window = window
        self._highest = -1
        #: The version the last read returned, and when that read began.
        self._last: tuple[int, float] | None = None
        self._warned = False

    def seen(self, head: Head, began: float, ended: float) -> None:
        """Check ``head``, read between ``began`` and ``ended`` (this learner's clock).

        Raises:
            InvalidDataError: the head's version is lower than one read before.
        """
        if head.version < self._highest:
            raise InvalidDataError(
                f"{self.key} went back from version {self._highest} to {head.version}: it was "
                f"restored from an older copy or rewritten. {start_over(self.key)}"
            )
        self._highest = head.version
        last, self._last = self._last, (head.version, began)
        if self.learner is None or self._warned or not head.written_at:
            return
        if head.written_by in ("", self.learner):
            return
        allowed = SKEW_FRACTION * self.window
        ahead = head.written_at - ended
        behind = last[1] - head.written_at if last is not None and head.version > last[0] else 0
        off = max(ahead, behind)
        if off > allowed:
            self._warned = True
            log.warning(
                "exchange learner %r: learner %r wrote %s with a clock at least %.0f s %s this "
                "one's (more than %.0f s, a quarter of active_window=%.0f s); active learners "
                "are counted by the writers' clocks, so the outer step goes wrong: "
                "synchronise the clocks (NTP, chrony)",
                self.learner,
                head.written_by,
                self.key,
                off,
                "ahead of" if ahead >= behind else "behind",
                allowed,
                self.window,
            )
