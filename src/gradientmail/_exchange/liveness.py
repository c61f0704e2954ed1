"""Which other learners are still exchanging, as this learner sees their ledger counts move.

A learner killed without leaving (a preempted node, an OOM, SIGKILL) keeps its ledger entry
for ``active_window`` seconds (600 by default), and its pace with it. Counted all that
while, its batch stays in the group's: every live learner's delta weighs less than its
share (with learners at 1x, 2x, 2x and 4x, one 2x learner dead leaves the others' deltas at
28/36 of their weight), and ``exchange.group_batch`` keeps asking for the lr of a batch the
group no longer trains on. :class:`Liveness` drops such a learner from the group, for
weights, batch sizes and the count of learners only, once the shared model has moved on
without it: once more versions were made since its last exchange than :data:`FACTOR` times
its usual number between two of its exchanges. That usual number is the larger of what its
pace implies (the group's exchanges per second, from everyone's published step time and
``every``, times its own interval) and what was observed between its counts. It is back at
its next exchange.

Silence is counted in versions, not seconds: when every learner stops at once (the store
out for a while, an evaluation or a checkpoint at the same step everywhere, the job
suspended), no version is made and nobody is taken for dead; and no wall clock enters,
so clock skew between machines cannot make a live learner look dead.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from gradientmail._exchange.layout import LearnerEntry

__all__ = ["FACTOR", "OUTLIER", "Liveness", "expected_versions"]

log = logging.getLogger("gradientmail.exchange")

#: Usual intervals (in versions) the shared model may move without a learner before it
#: leaves the group; never fewer than this many versions.
FACTOR = 10.0
#: How much of the newest observed interval enters the usual one.
SMOOTHING = 0.2
#: An observed interval longer than this many usual ones counts as this many: a pause it
#: came back from does not hide its death for long afterwards.
OUTLIER = 4.0


@dataclass
class _Seen:
    seq: int
    #: The head version at which its count was last seen to move (or first seen).
    version: int
    #: Whether ``version`` is a move, not a first sight: intervals are measured from moves.
    moved: bool = False
    #: The usual versions between two of its exchanges, as observed (0: not yet).
    usual: float = 0.0
    #: Whether it was live at the last read (a change is logged).
    live: bool = True


class Liveness:
    """Other learners' exchange counts against the shared model's versions, as this learner
    reads the head (exchange thread only)."""

    def __init__(self) -> None:
        self._seen: dict[str, _Seen] = {}

    def live(self, name: str, entry: LearnerEntry, version: int, expected: float) -> bool:
        """Record ``entry``'s count as read in the head at ``version``; whether its learner
        still exchanges.

        Args:
            name: the learner.
            entry: its ledger entry in that head.
            version: the head's version.
            expected: the versions the group makes per exchange of this learner, from the
                published paces (0: not known).
        """
        seen = self._seen.get(name)
        if seen is None:
            self._seen[name] = _Seen(entry.seq, version)
            return True
        usual = max(1.0, seen.usual, expected)
        if entry.seq != seen.seq:
            if seen.moved:
                interval = (version - seen.version) / max(1, entry.seq - seen.seq)
                if seen.usual <= 0:
                    seen.usual = interval
                else:
                    seen.usual += SMOOTHING * (min(interval, OUTLIER * usual) - seen.usual)
            seen.seq, seen.version, seen.moved = entry.seq, version, True
            return self._now(name, seen, live=True)
        return self._now(name, seen, live=version - seen.version <= FACTOR * usual)

    @staticmethod
    def _now(name: str, seen: _Seen, live: bool) -> bool:
        """``live``, logged when it changed: who the group's batch leaves out is visible."""
        if live != seen.live:
            seen.live = live
            if live:
                log.info("learner %r exchanges again: back in the group's batch", name)
            else:
                log.info(
                    "learner %r made no exchange while the shared model moved on from "
                    "version %d: left out of the group's batch until it exchanges again",
                    name,
                    seen.version,
                )
        return live


def expected_versions(entries: Mapping[str, LearnerEntry]) -> dict[str, float]:
    """The versions the group makes per exchange of each learner, from the published paces:
    the group's exchanges per second times the learner's seconds between two exchanges
    (0 for a learner whose pace is not measured yet, which adds no exchanges either)."""
    rate = sum(1.0 / e.pace.exchange_seconds for e in entries.values() if e.pace.measured)
    return {
        name: rate * e.pace.exchange_seconds if e.pace.measured else 0.0
        for name, e in entries.items()
    }
