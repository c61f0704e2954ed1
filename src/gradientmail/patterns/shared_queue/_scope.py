"""What a learner's epochs share: :class:`Setup`, what every epoch of one queue runs with
(its arguments and its completion gate), and :class:`Scope`, what one epoch's threads
share, built once per epoch and read by the loader, its waiting and takeovers, and the
completion recorder.

Both are frozen: the parts they name stay the same for as long as the epoch runs. Each
part guards its own state (the holdings their lock); the stats are telemetry, counted
without a lock by the threads of the learner's open epochs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gradientmail._counting import RequestTally
from gradientmail.mailbox import Mailbox
from gradientmail.patterns._leases import Lease
from gradientmail.patterns._progress import ProgressReporter
from gradientmail.patterns.shared_queue._completion_gate import CompletionGate
from gradientmail.patterns.shared_queue._holdings import Holdings
from gradientmail.patterns.shared_queue._policy import ClaimPolicy
from gradientmail.patterns.shared_queue._stats import QueueStats
from gradientmail.patterns.shared_queue._unit_claims import UnitClaims

__all__ = ["Scope", "Setup"]


@dataclass(frozen=True)
class Setup:
    """What every epoch of one learner shares."""

    mailbox: Mailbox
    units: Mapping[str, Any]
    load: Callable[[Any], Iterable[Any]]
    learner_id: str
    prefetch: int
    reporter: ProgressReporter | None
    wait_for_others: bool
    shared_order: bool
    #: When a unit whose last item the consumer took is recorded done.
    gate: CompletionGate
    #: The learners that load for the same consumer as this one (the other DataLoader
    #: workers of its rank): units they hold when this one ends are no other learner's.
    siblings: frozenset[str] = frozenset()
    #: Where every request of the learner's epochs is counted, each try of it (the one
    #: counting door; ``stats.cost`` is a view of it).
    tally: RequestTally = field(default_factory=RequestTally)


@dataclass(frozen=True)
class Scope:
    """One epoch of one learner: its claims and claim policy, the learner's lease, the
    units it holds, its stats, and the event set when the queue closes."""

    #: The epoch's claims, for this learner and incarnation (with the mailbox and layout).
    claims: UnitClaims
    #: The learner's one lease, shared by all its epochs.
    lease: Lease
    #: Which unit to claim next.
    policy: ClaimPolicy
    #: The units this learner holds in the epoch.
    holdings: Holdings
    #: The learner's stats, shared by all its epochs.
    stats: QueueStats
    #: Set when the queue closes: every thread of the epoch stops waiting.
    closing: threading.Event
