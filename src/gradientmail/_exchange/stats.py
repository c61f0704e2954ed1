"""What one learner's exchanges did: the figures behind ``Exchange.stats``."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

__all__ = ["ExchangeStats", "ExchangeTraffic"]


@dataclass(frozen=True)
class ExchangeTraffic:
    """Requests sent to the store and value bytes moved: the values' bytes and the head
    records', not the protocol's headers."""

    requests: int = 0
    bytes_read: int = 0
    bytes_written: int = 0

    def plus(self, *, requests: int = 0, read: int = 0, written: int = 0) -> ExchangeTraffic:
        """This traffic and ``requests`` more, having read and written that many bytes."""
        return ExchangeTraffic(
            self.requests + requests, self.bytes_read + read, self.bytes_written + written
        )


@dataclass(frozen=True)
class ExchangeStats:
    """What one learner's exchanges did so far.

    ``blocked_s`` is the time :meth:`Exchange.step` spent in the training loop's thread
    (adopting a version, copying a snapshot); the store is never waited on there, except
    when leaving. ``staleness_*`` count versions other learners applied between this
    learner's anchor and its exchange. ``traffic`` counts this learner's requests and bytes
    to the shared model, joining included.
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
