"""Telemetry shared by the patterns: counter dataclasses and latency summaries.

* :class:`Stats`: a dataclass base whose fields all have defaults, with :meth:`Stats.snapshot`
  and :meth:`Stats.as_dict`.
* :class:`Latencies`: count, total, maximum and percentiles of a duration, from a bounded
  reservoir sample.
* :class:`QueueStats`: a ``shared_queue`` learner's telemetry (``queue.stats``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, fields, replace
from typing import Any, TypeVar

__all__ = ["Latencies", "QueueStats", "Stats"]

_S = TypeVar("_S", bound="Stats")


@dataclass
class Stats:
    """Base for a pattern's counters: a dataclass whose fields all have defaults.

    Counters are written by the thread that owns each of them (a consumer writes its wait
    time, a loader its claims), so reading them from another thread gives a consistent-enough
    view without locks. :meth:`snapshot` copies them for reporting.
    """

    def snapshot(self: _S) -> _S:
        """A copy of the current values (``Latencies`` fields are copied, not shared)."""
        copied = {
            f.name: getattr(self, f.name).copy()
            for f in fields(self)
            if isinstance(getattr(self, f.name), Latencies)
        }
        return replace(self, **copied)

    def as_dict(self) -> dict[str, Any]:
        """The values as plain JSON-friendly data (``Latencies`` as their summary)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            out[f.name] = value.summary() if isinstance(value, Latencies) else value
        return out


class Latencies:
    """A duration's count, total, maximum, and percentiles from a bounded sample.

    ``add`` is cheap (no lock; one writer thread). At most ``keep`` samples are retained,
    chosen by reservoir sampling, so percentiles stay representative over long runs.
    """

    __slots__ = ("_rng", "count", "keep", "max", "samples", "total")

    def __init__(self, keep: int = 4096) -> None:
        self.keep = keep
        self.count = 0
        self.total = 0.0
        self.max = 0.0
        self.samples: list[float] = []
        self._rng = random.Random(0)

    def add(self, seconds: float) -> None:
        """Record one duration in seconds."""
        self.count += 1
        self.total += seconds
        if seconds > self.max:
            self.max = seconds
        if len(self.samples) < self.keep:
            self.samples.append(seconds)
        else:
            slot = self._rng.randrange(self.count)
            if slot < self.keep:
                self.samples[slot] = seconds

    @property
    def mean(self) -> float:
        """Mean seconds (0.0 when empty)."""
        return self.total / self.count if self.count else 0.0

    def percentile(self, q: float) -> float:
        """The ``q``-th percentile (0-100) of the retained samples, 0.0 when empty."""
        if not self.samples:
            return 0.0
        ordered = sorted(self.samples)
        index = min(len(ordered) - 1, max(0, round(q / 100.0 * (len(ordered) - 1))))
        return ordered[index]

    def copy(self) -> Latencies:
        """An independent copy."""
        other = Latencies(self.keep)
        other.count, other.total, other.max = self.count, self.total, self.max
        other.samples = list(self.samples)
        return other

    def summary(self) -> dict[str, float]:
        """``count``, ``mean``, ``p50``, ``p99`` and ``max`` (seconds)."""
        return {
            "count": self.count,
            "mean": self.mean,
            "p50": self.percentile(50),
            "p99": self.percentile(99),
            "max": self.max,
        }

    def __repr__(self) -> str:
        return f"Latencies(count={self.count}, mean={self.mean:.6f}s, max={self.max:.6f}s)"


@dataclass
class QueueStats(Stats):
    """A learner's queue telemetry. Read ``queue.stats`` at any time, or ``.snapshot()``."""

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
    #: units of this epoch already done when the queue started (a resumed run).
    units_done_before: int = 0
    #: ``True`` once every unit of the epoch is done (this learner saw the end).
    run_complete: bool = False
    #: items returned by ``next()``.
    items_delivered: int = 0
    #: seconds the consumer spent blocked in ``next()`` waiting for an item.
    wait_s: float = 0.0
    #: seconds per won claim: the ``put_if_absent`` plus its read-back.
    claim_latency: Latencies = field(default_factory=Latencies)
    #: claims lost because another learner had created the unit first.
    conflicts_lost: int = 0
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
