"""Taking over the items a dead consumer had claimed and not delivered.

Every consumer walks every producer's items in order, so it passes every claim. A claim it
passes that another consumer holds and has not delivered is noted in :class:`Undelivered`,
grouped by owner (id and lease incarnation). Nothing is listed and nothing is read again
while the owner lives: an owner returns its items in claim order, so a claim numbered below
the highest ``delivered_before`` seen from that owner must have been delivered, and is
forgotten. A group therefore holds about ``prefetch`` claims at most.

When a consumer has nothing else to take (:meth:`Undelivered.take_one`), it observes the
owners of its noted claims with a :class:`~gradientmail.patterns._leases.LeaseWatcher`, once
per renewal period each. An owner is dead when its lease was unchanged for a whole lease
duration and this consumer declared it lost (compare-and-swap on the lease, so a renewal in
between wins), when its lease says it ended (``released`` by ``close()``, ``failed``), or
when a newer incarnation of the same id holds the lease. Its noted claims are then read again
and each one still ``claimed`` is taken over with ``put_if_match`` (exactly one taker wins,
and an item the owner delivered meanwhile is never taken).

Once every producer is exhausted, the same noted claims decide when a consumer may stop: not
before each is delivered by its live owner (read again at each poll) or taken over.

Without compare-and-swap nothing can be taken over safely: a dead owner's undelivered items
raise :class:`~gradientmail._errors.PipelineError` naming them, in every consumer that noted
them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from gradientmail._errors import PipelineError
from gradientmail.patterns._leases import LeaseWatcher
from gradientmail.patterns.pipeline._item_claims import HeldItem, ItemClaims
from gradientmail.patterns.pipeline._records import ItemClaim

__all__ = ["Undelivered"]

#: An owner: its consumer id and lease incarnation.
Owner = tuple[str, int]

#: A consumer found dead with undelivered items at WARNING; each item taken over at INFO.
_log = logging.getLogger(__name__)


@dataclass
class _Group:
    """One owner's claims that this consumer passed and has not seen delivered."""

    #: Every claim of this owner numbered below this was delivered.
    frontier: int = 0
    #: (producer, seq) → claim number.
    items: dict[tuple[str, int], int] = field(default_factory=dict)
    #: When the owner's lease was last observed (monotonic), and whether it is dead.
    observed: float = float("-inf")
    dead: bool = False

    def advance(self, frontier: int) -> None:
        """Every claim numbered below ``frontier`` is known delivered: forget those."""
        if frontier > self.frontier:
            self.frontier = frontier
            self.items = {item: n for item, n in self.items.items() if n >= frontier}


class Undelivered:
    """The claims of other consumers this consumer passed and has not seen delivered.

    Used by the prefetch thread only.
    """

    def __init__(self, claims: ItemClaims, watcher: LeaseWatcher, period: float) -> None:
        self._claims = claims
        self._watcher = watcher
        self._period = period
        self._groups: dict[Owner, _Group] = {}

    def __bool__(self) -> bool:
        return bool(self._groups)

    def note(self, producer: str, seq: int, claim: ItemClaim) -> None:
        """Remember ``claim`` (just read) if another consumer holds it undelivered."""
        owner = (claim.owner, claim.incarnation)
        if owner == (self._claims.owner, self._claims.incarnation):
            return  # our own: our loop delivers it
        group = self._groups.get(owner)
        if group is None:
            if claim.settled:
                return
            group = self._groups[owner] = _Group()
        # The owner returns its claims in order: this one's state moves the frontier.
        group.advance(claim.n + 1 if claim.settled else claim.delivered_before)
        if not claim.settled and claim.n >= group.frontier:
            group.items[(producer, seq)] = claim.n
        self._drop_if_empty(owner, group)

    def take_one(self, now: float, *, at_end: bool) -> HeldItem | None:
        """Take over one undelivered claim of a dead owner, if there is one.

        Owners are observed at most once per renewal period. With ``at_end`` (every
        producer exhausted), the claims of live owners are read again, so that delivered
        ones are forgotten and the consumer can stop.

        The caller checks its own lease first (:meth:`Lease.ensure_fresh`): taking over is
        an owner's act.

        Raises:
            PipelineError: a dead owner's items cannot be taken over (no compare-and-swap).
        """
        for owner, group in sorted(self._groups.items()):
            if not group.dead and now - group.observed >= self._period:
                group.observed = now
                group.dead = self._is_dead(owner)
                if group.dead:
                    _log.warning(
                        "consumer %r (incarnation %d) is gone with item(s) claimed and not "
                        "returned (%s); %r takes them over",
                        owner[0],
                        owner[1],
                        _describe(group),
                        self._claims.owner,
                    )
            if group.dead:
                held = self._take_from(owner, group)
                if held is not None:
                    return held
            elif at_end:
                self._reread(owner, group)
        return None

    def _is_dead(self, owner: Owner) -> bool:
        holder, incarnation = owner
        if holder == self._claims.owner and incarnation < self._claims.incarnation:
            return True  # our own earlier incarnation: this one took its lease over
        observed = self._watcher.observe(holder)
        if observed.incarnation > incarnation:
            return True  # a newer incarnation of that id holds the lease: this one is fenced
        return self._watcher.declare_if_dead(observed, self._claims.owner)

    def _take_from(self, owner: Owner, group: _Group) -> HeldItem | None:
        if not self._claims.cas:
            raise PipelineError(
                f"consumer {owner[0]!r} stopped with {len(group.items)} item(s) claimed and "
                f"not delivered: {_describe(group)}; this mailbox has no compare-and-swap, "
                "so no other consumer can take them over safely, and they are lost"
            )
        for (producer, seq), _ in sorted(group.items.items(), key=lambda entry: entry[1]):
            if group.items.pop((producer, seq), None) is None:
                continue  # forgotten meanwhile: a later claim showed it delivered
            current = self._claims.read(producer, seq)
            if current is None:
                raise PipelineError(
                    f"the claim of item {producer}#{seq} disappeared; was the mailbox edited?"
                )
            claim, version = current
            if (claim.owner, claim.incarnation) == owner and not claim.settled:
                assert version is not None
                held = self._claims.take_over(producer, seq, claim, version)
                if held is not None:
                    _log.info(
                        "%r took over item %s from %r",
                        self._claims.owner,
                        held.describe(),
                        owner[0],
                    )
                    self._drop_if_empty(owner, group)
                    return held
                current = self._claims.read(producer, seq)  # changed meanwhile: look again
                if current is None:
                    continue
                claim = current[0]
            self.note(producer, seq, claim)  # delivered, or someone else's now
        self._drop_if_empty(owner, group)
        return None

    def _reread(self, owner: Owner, group: _Group) -> None:
        for producer, seq in list(group.items):
            if (producer, seq) not in group.items:
                continue  # forgotten meanwhile: a later claim showed it delivered
            current = self._claims.read(producer, seq)
            if current is None:
                continue
            claim = current[0]
            if (claim.owner, claim.incarnation) != owner or claim.settled:
                del group.items[(producer, seq)]
                self.note(producer, seq, claim)
        self._drop_if_empty(owner, group)

    def _drop_if_empty(self, owner: Owner, group: _Group) -> None:
        if not group.items and self._groups.get(owner) is group:
            del self._groups[owner]

    def describe(self) -> str:
        """The noted claims by owner, for a stall message."""
        return "; ".join(
            f"{holder} ({'dead' if group.dead else 'alive'}): {_describe(group)}"
            for (holder, _), group in sorted(self._groups.items())
        )


def _describe(group: _Group, limit: int = 8) -> str:
    items = sorted(group.items)
    shown = ", ".join(f"{producer}#{seq}" for producer, seq in items[:limit])
    more = f" and {len(items) - limit} more" if len(items) > limit else ""
    return shown + more
