"""What one learner's exchanges did: the figures behind ``Exchange.stats``, and their owner.

:class:`Tally` is the one place those figures change: the training loop counts its steps
there, and the exchange thread its conflicts, unknown outcomes and exchanges, each under
the lock it is given, so that ``Exchange.stats`` is one consistent snapshot. Only
``traffic`` is counted elsewhere: it is a view (:meth:`ExchangeTraffic.of`) of what the
counting door (:class:`~gradientmail._counting.Counting`) that every request of the store
goes through counted.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace

from gradientmail._counting import RECEIVED, SENT, RequestCounts

__all__ = ["ExchangeStats", "ExchangeTraffic", "NoiseGain", "Tally"]


@dataclass(frozen=True)
class ExchangeTraffic:
    """Requests sent to the store and value bytes moved: the values' bytes and the head
    records', not the protocol's headers."""

    requests: int = 0
    bytes_read: int = 0
    bytes_written: int = 0

    @classmethod
    def of(cls, counts: RequestCounts) -> ExchangeTraffic:
        """The traffic in what a learner's counting door counted: every request (each try
        of one), the bytes of every value received and sent."""
        return cls(counts.total(), counts.measured(RECEIVED), counts.measured(SENT))


@dataclass(frozen=True)
class NoiseGain:
    """The noise gain of a learner's last delta applied (1: none), and the gradients' noise
    scale fitted then: the batch beyond which more items a step help little (``None`` until
    learners on two batch sizes measured their gradients). See ``docs/exchange.md``."""

    gain: float = 1.0
    scale: float | None = None


@dataclass(frozen=True)
class ExchangeStats:
    """What one learner's exchanges did so far.

    ``blocked_s`` is the time :meth:`Exchange.step` spent in the training loop's thread
    (adopting a version, copying a snapshot); the store is never waited on there, except
    when leaving. ``staleness_*`` count versions other learners applied between this
    learner's anchor and its exchange. ``traffic`` counts this learner's requests and bytes
    to the shared model, joining included. ``noise`` is the noise gain of the last delta
    applied and the noise scale it came from (:class:`NoiseGain`).
    """

    steps: int = 0
    exchanges: int = 0
    dropped: int = 0
    conflicts: int = 0
    unknown_outcomes: int = 0
    version: int = -1
    blocked_s: float = 0.0
    staleness_last: int = 0
    staleness_sum: int = 0
    staleness_max: int = 0
    traffic: ExchangeTraffic = field(default_factory=ExchangeTraffic)
    noise: NoiseGain = field(default_factory=lambda: NoiseGain())

    @property
    def staleness_mean(self) -> float:
        """Versions others applied between this learner's anchor and its exchange, on
        average over its exchanges."""
        return self.staleness_sum / self.exchanges if self.exchanges else 0.0

    def counted(self, *, version: int, tau: int, applied: bool) -> ExchangeStats:
        """These stats after one exchange (``applied``) or one drop, at staleness ``tau``."""
        return replace(
            self,
            exchanges=self.exchanges + int(applied),
            dropped=self.dropped + int(not applied),
            version=version,
            staleness_last=tau,
            staleness_sum=self.staleness_sum + tau * int(applied),
            staleness_max=max(self.staleness_max, tau),
        )


class Tally:
    """The one owner of an exchange's counters: every change and every snapshot under
    :attr:`lock`.

    The lock is also the one between the training loop and the exchange thread (it is
    re-entrant), so the thread publishes an exchange's count in the same critical section
    as its result: no snapshot counts an exchange that the training loop cannot adopt yet.
    """

    def __init__(self) -> None:
        self.lock = threading.Condition()
        self._stats = ExchangeStats()

    def joined(self, version: int) -> None:
        """The learner joined the shared model at ``version``."""
        with self.lock:
            self._stats = replace(self._stats, version=version)

    def stepped(self, blocked_s: float) -> None:
        """One local step, whose exchange work blocked the training loop ``blocked_s``."""
        with self.lock:
            steps, blocked = self._stats.steps + 1, self._stats.blocked_s + blocked_s
            self._stats = replace(self._stats, steps=steps, blocked_s=blocked)

    def blocked(self) -> float:
        """Seconds the training loop was blocked so far."""
        with self.lock:
            return self._stats.blocked_s

    def conflict(self) -> None:
        """Another learner swapped the head first."""
        with self.lock:
            self._stats = replace(self._stats, conflicts=self._stats.conflicts + 1)

    def unknown_outcome(self) -> None:
        """A write's outcome was unknown (settled afterwards by reading the head)."""
        with self.lock:
            self._stats = replace(self._stats, unknown_outcomes=self._stats.unknown_outcomes + 1)

    def exchanged(self, *, version: int, tau: int, applied: bool) -> None:
        """One exchange applied (or one drop), at staleness ``tau``; the caller holds the lock
        while it hands the result over."""
        with self.lock:
            self._stats = self._stats.counted(version=version, tau=tau, applied=applied)

    def weighed(self, gain: float, noise_scale: float | None) -> None:
        """The last delta applied had this noise gain, at this noise scale."""
        with self.lock:
            self._stats = replace(self._stats, noise=NoiseGain(gain, noise_scale))

    def adopted(self, version: int) -> None:
        """The learner will adopt ``version``, newer than its exchange produced."""
        with self.lock:
            self._stats = replace(self._stats, version=version)

    def snapshot(self, traffic: ExchangeTraffic) -> ExchangeStats:
        """The counters now, with ``traffic`` as the store counted it."""
        with self.lock:
            return replace(self._stats, traffic=traffic)
