"""A ``shared_queue`` learner's telemetry: what ``queue.stats`` counts."""

from __future__ import annotations

from dataclasses import dataclass, field

from gradientmail.patterns._stats import Latencies, Stats

__all__ = ["QueueCost", "QueueStats"]


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
    #: polls while waiting: a listing of the leases and of the idle markers each.
    idle_polls: int = 0
    #: keys read by all those listings.
    listed_keys: int = 0
    #: lease writes (acquiring and renewing), counted when the queue closes.
    lease_renewals: int = 0


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
