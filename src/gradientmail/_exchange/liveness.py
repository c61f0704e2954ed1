"""Which other learners are still exchanging, as this learner sees their ledger counts move.

A learner killed without leaving (a preempted node, an OOM, SIGKILL) keeps its ledger entry
for ``active_window`` seconds (600 by default), and its pace with it. Counted all that
while, its batch stays in the group's: every live learner's delta weighs less than its
share (with learners at 1x, 2x, 2x and 4x, one 2x learner dead leaves the others' deltas at
28/36 of their weight), and ``exchange.group_batch`` keeps asking for the lr of a batch the
group no longer trains on. :class:`Liveness` drops such a learner from the group, for
weights and batch sizes only, once its ledger count has not moved for :data:`FACTOR` times
its usual interval between exchanges (at least :data:`FLOOR` seconds): the larger of its
published step time times ``every``, and the interval this learner has observed between
its counts. A paused learner is out of the group while it trains on nothing, and back at
its next exchange.

Time is this learner's own monotonic clock, at its reads of the head: other machines' wall
clocks never enter, so clock skew cannot make a live learner look dead.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from gradientmail._exchange.layout import LearnerEntry

__all__ = ["FACTOR", "FLOOR", "Liveness"]

#: Usual intervals a learner's count may stand still before it leaves the group.
FACTOR = 10.0
#: Seconds a learner's count may always stand still (clock granularity, short pauses).
FLOOR = 1.0
#: How much of the newest observed interval enters the usual one.
SMOOTHING = 0.2
#: An observed interval longer than this many usual ones counts as this many.
OUTLIER = 4.0


@dataclass
class _Seen:
    seq: int
    #: When its count last moved, on this learner's clock.
    moved_at: float
    #: The usual interval between its counts, as observed (0: not yet).
    usual: float = 0.0


class Liveness:
    """Other learners' exchange counts over time, observed at this learner's head reads
    (exchange thread only).

    Args:
        clock: monotonic seconds (``time.monotonic`` unless a test drives one).
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._seen: dict[str, _Seen] = {}

    def live(self, name: str, entry: LearnerEntry) -> bool:
        """Record ``entry``'s count as read now; whether its learner still exchanges."""
        now = self.clock()
        seen = self._seen.get(name)
        if seen is None or entry.seq < seen.seq:  # first seen, or a restart's new count
            self._seen[name] = _Seen(entry.seq, now)
            return True
        if entry.seq != seen.seq:
            interval = (now - seen.moved_at) / (entry.seq - seen.seq)
            if seen.usual <= 0:
                seen.usual = interval
            else:  # a pause it came back from counts as a few intervals, not all of it
                interval = min(interval, OUTLIER * seen.usual)
                seen.usual += SMOOTHING * (interval - seen.usual)
            seen.seq, seen.moved_at = entry.seq, now
            return True
        pace = entry.pace
        usual = max(seen.usual, pace.step_seconds * max(1, pace.every))
        return now - seen.moved_at <= max(FLOOR, FACTOR * usual)
