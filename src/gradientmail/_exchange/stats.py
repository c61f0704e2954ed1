"""What one learner's exchanges did: the figures behind ``Exchange.stats``."""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class ExchangeStats:
    """What one learner's exchanges did so far.

    ``blocked_s`` is the time :meth:`Exchange.step` spent in the training loop's thread
    (adopting a version, copying a snapshot); the store is never waited on there, except
    when leaving. ``staleness_*`` count versions other learners applied between this
    learner's anchor and its exchange. ``requests``, ``bytes_read`` and ``bytes_written``
    count this learner's traffic to the shared model (joining included): the values' bytes
    and the head records', not the protocol's headers.
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
    requests: int = 0
    bytes_read: int = 0
    bytes_written: int = 0

    @property
    def staleness_mean(self) -> float:
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
