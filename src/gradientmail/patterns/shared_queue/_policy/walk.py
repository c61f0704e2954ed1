"""Where a learner's walk through its preference order is, and which way it goes.

A :class:`Walk` is part of the claim policy
(:class:`~gradientmail.patterns.shared_queue._policy.claim_policy.ClaimPolicy`):
it decides the next position of the walk from what the policy believes taken, and is
moved by the policy (a win walks on, a jump lands it elsewhere).
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Walk"]


@dataclass
class Walk:
    """The walk's position and direction."""

    next: int = 0
    #: Walking the current run from its last unit (:attr:`run_end`) towards its first,
    #: where whoever walks it from the front meets this learner.
    backward: bool = False
    run_end: int = -1
    #: The last position of a page whose free runs this learner takes one after another
    #: (a sweep's page, or the freshest page of short runs; a page for each run would cost
    #: a request each), ``-1`` when none.
    sparse_until: int = -1
    #: Where the other members start: a walk stops there, once each.
    stops: set[int] = field(default_factory=set)

    def won(self, position: int) -> None:
        """The claim of ``position`` was won: walk on from it."""
        self.next = position - 1 if self.backward else position + 1

    def candidate(self, taken: bytearray, paged: bool) -> int | None:
        """The next position of the walk, or ``None`` to jump.

        With pages, the one after the last claim if believed free: a wall means another
        learner's stretch, and a jump costs only a page. Where another member starts is a
        wall too, the first time the walk reaches it. Without, the next position believed
        free, walking past walls the policy knows of (a jump is blind).
        """
        p = self.next
        if paged:
            if self.backward:
                if p >= 0 and not taken[p]:
                    return p
                # Met a unit known taken: the run is done; on to the next the page showed.
                return self._sparse_next(taken)
            if p in self.stops:
                self.stops.discard(p)
                return None  # another member's start: it claimed this unit first
            if p < len(taken) and not taken[p]:
                return p
            return None
        p = taken.find(0, p)
        return p if p >= 0 else None

    def _sparse_next(self, taken: bytearray) -> int | None:
        """After a backward walk ended: the next unit of the sparse page to claim.

        The last unit of the next free run after the one just walked; ``None`` when the page
        has none left (then it is forgotten).
        """
        until = self.sparse_until
        if self.run_end < until:
            q = taken.find(0, self.run_end + 1, until + 1)
            if q >= 0:
                return self.from_end(taken, q, until)
        self.backward = False
        self.sparse_until = -1
        return None

    def from_end(self, taken: bytearray, q: int, limit: int) -> int:
        """Walk the free run at ``q`` backward from its last unit (at most ``limit``)."""
        end = taken.find(1, q, limit + 1)
        return self.back_from(limit if end < 0 else end - 1)

    def back_from(self, p: int) -> int:
        """Walk backward from ``p``; after it, the sparse page's runs after ``p``."""
        self.backward = True
        self.run_end = self.next = p
        return p

    def forward_from(self, p: int) -> int:
        """Walk forward from ``p``."""
        self.backward = False
        self.next = p
        return p
