"""A ``shared_queue`` learner's telemetry: what ``queue.stats`` counts.

Its store requests are counted by one door, :class:`~gradientmail._counting.Counting`, which
the learner's epochs send every request through (the takeovers' scans through a door of
their own label, :data:`SCANS`); ``queue.stats.cost`` is a view of those counts
(:meth:`QueueCost.of`), taken each time ``queue.stats`` is read.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gradientmail._counting import CALLS, KEYS, RequestCounts
from gradientmail.patterns._stats import Latencies, Stats

__all__ = ["SCANS", "QueueCost", "QueueStats"]

#: The label a learner's takeovers count their requests under.
SCANS = "scans"
#: The groups of claims (``units/``) and completions (``done/``).
_CLAIMS = ("units", "done")


@dataclass
class QueueCost(Stats):
    """What claiming and waiting cost in store requests: ``queue.stats.cost``."""

    #: listings of claims or completions taken while claiming: at the start, one page per
    #: jump after a lost claim (a full listing where the store cannot start a listing at a
    #: key), and the listing of completions that confirms the end.
    listings: int = 0
    #: scans (a listing of claims and one of completions, and a read of each open claim)
    #: taken while waiting, to take over the units of a learner that died or left.
    wait_scans: int = 0
    #: listings of the idle markers while waiting (a poll that lists them again to confirm
    #: what it saw counts two).
    idle_polls: int = 0
    #: keys read by all the listings of claims and completions.
    listed_keys: int = 0
    #: lease writes that succeeded (acquiring and renewing).
    lease_renewals: int = 0

    @classmethod
    def of(cls, counts: RequestCounts, lease_renewals: int = 0) -> QueueCost:
        """The view of a learner's counted requests (its lease's renewals are the lease's)."""
        listings = scans = keys = 0
        for group in _CLAIMS:
            calls = counts.measured(CALLS, operation="list", group=group)
            scanned = counts.measured(CALLS, operation="list", group=group, label=SCANS)
            listings += calls - scanned
            scans += scanned if group == "units" else 0
            keys += counts.measured(KEYS, operation="list", group=group)
        polls = counts.measured(CALLS, operation="list", group="idle")
        return cls(listings, scans, polls, keys, lease_renewals)


@dataclass
class QueueStats(Stats):
    """A learner's queue telemetry. Read ``queue.stats`` at any time, or ``.snapshot()``."""

    #: seconds per won claim: the ``put_if_absent`` plus its read-back.
    claim_latency: Latencies = field(default_factory=Latencies)
    #: units this learner claimed or took over (and verified).
    units_claimed: int = 0
    #: units whose every item the consumer took.
    units_finished: int = 0
    #: completions this learner recorded.
    units_completed: int = 0
    #: units taken over from a learner that died, left early, or an earlier incarnation.
    units_reclaimed: int = 0
    #: units given back unfinished when the queue was left early.
    units_released: int = 0
    #: ``True`` once every unit of the epoch is done (this learner saw the end).
    run_complete: bool = False
    #: units already done when the queue started (a resumed run), summed over the epochs.
    units_done_before: int = 0
    #: items returned by ``next()``.
    items_delivered: int = 0
    #: seconds the consumer spent blocked in ``next()`` waiting for an item.
    wait_s: float = 0.0
    #: claims lost because another learner had created the unit first.
    conflicts_lost: int = 0
    #: the store requests that claiming and waiting took (see :class:`QueueCost`).
    cost: QueueCost = field(default_factory=QueueCost)
