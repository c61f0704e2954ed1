"""The life of one item's claim: claimed, then delivered or taken over, each exactly once.

A mailbox consumer changes an item's claim (``claims/{producer}/{seq}``) only through
:class:`ItemClaims`:

* :meth:`ItemClaims.claim` creates the claim with ``put_if_absent`` and reads it back, so
  exactly one consumer wins a new item;
* :meth:`ItemClaims.deliver` swaps the owner's claim to ``delivered`` with ``put_if_match``
  against the version it holds, once ``next()`` has returned the item (in the background:
  :class:`~gradientmail.patterns.pipeline._deliveries.DeliveryRecorder`). It fails if another
  consumer took the item over first;
* :meth:`ItemClaims.take_over` swaps a ``claimed`` claim whose owner died to this consumer,
  with ``put_if_match`` against the version that was read, so exactly one taker wins, and
  a delivered item is never taken over: delivering and taking over race on one version.

Each claim records its owner's lease incarnation, a claim number ``n`` (the order in which
the owner returns its items) and ``delivered_before``, how many of its claims the owner had
delivered when it made this one. Other consumers use the last two to forget claims that must
have been delivered without reading them again (see
:mod:`~gradientmail.patterns.pipeline._takeover`).

Without compare-and-swap, delivering is a plain overwrite by the owner and nothing is taken
over: :mod:`~gradientmail.patterns.pipeline._takeover` reports a dead consumer's undelivered
items instead.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from gradientmail._errors import LeaseLostError, OutcomeUnknownError
from gradientmail.mailbox import Capability, Mailbox, Version
from gradientmail.patterns._claims import claim_versioned, new_token, read_versioned
from gradientmail.patterns.pipeline._records import (
    CLAIMED,
    DELIVERED,
    FAILED,
    ItemClaim,
    claim_key,
)

__all__ = ["HeldItem", "ItemClaims"]

#: Attempts at a delivery whose outcome the store could not report, before giving up.
_DELIVERY_ATTEMPTS = 3


@dataclass(frozen=True)
class HeldItem:
    """An item this consumer holds: its claim and the version it may swap from."""

    producer: str
    seq: int
    claim: ItemClaim
    version: Version | None

    @property
    def key(self) -> str:
        """The claim's key."""
        return claim_key(self.producer, self.seq)

    def describe(self) -> str:
        """``producer#seq``, for messages."""
        return f"{self.producer}#{self.seq}"


class ItemClaims:
    """One consumer incarnation's operations on item claims.

    Args:
        mailbox: the run's mailbox.
        owner: the consumer id.
        incarnation: the consumer's lease incarnation.

    :meth:`claim` and :meth:`take_over` run on the prefetch thread, :meth:`deliver` on the
    thread that iterates; each counter has one writer.
    """

    def __init__(self, mailbox: Mailbox, owner: str, incarnation: int) -> None:
        self.mailbox = mailbox
        self.owner = owner
        self.incarnation = incarnation
        self.cas = mailbox.supports(Capability.COMPARE_AND_SWAP)
        #: claims made (new and taken over); the next one is numbered this.
        self.claimed = 0
        #: claims delivered (their item or its error returned by ``next()``).
        self.delivered = 0

    def _new(self, token: str, claimed_at: float, taken_from: str | None) -> ItemClaim:
        return ItemClaim(
            owner=self.owner,
            token=token,
            claimed_at=claimed_at,
            incarnation=self.incarnation,
            n=self.claimed,
            delivered_before=self.delivered,
            state=CLAIMED,
            taken_from=taken_from,
        )

    def claim(self, producer: str, seq: int) -> HeldItem | None:
        """Claim a new item: one ``put_if_absent`` and one read-back; ``None`` if lost."""
        key = claim_key(producer, seq)
        mine = self._new("", 0.0, None)
        won = claim_versioned(
            self.mailbox,
            key,
            self.owner,
            incarnation=mine.incarnation,
            n=mine.n,
            delivered_before=mine.delivered_before,
            state=CLAIMED,
        )
        if won is None:
            return None
        record, version = won
        self.claimed += 1
        return HeldItem(
            producer, seq, replace(mine, token=record.token, claimed_at=record.claimed_at), version
        )

    def read(self, producer: str, seq: int) -> tuple[ItemClaim, Version | None] | None:
        """The claim of item ``seq`` of ``producer`` and its version; ``None`` if unclaimed.

        Raises:
            PipelineError: the key holds something other than a claim.
        """
        key = claim_key(producer, seq)
        found = read_versioned(self.mailbox, key, self.cas)
        if found is None:
            return None
        data, version = found
        return ItemClaim.from_bytes(data, key, self.mailbox.url), version

    def take_over(
        self, producer: str, seq: int, claim: ItemClaim, version: Version
    ) -> HeldItem | None:
        """Swap ``claim`` (read at ``version``, owned by a dead consumer) to this consumer.

        Returns the new :class:`HeldItem`, or ``None`` when the claim changed since it was read
        (its owner delivered it, or another consumer took it first).
        """
        key = claim_key(producer, seq)
        mine = self._new(new_token(), time.time(), claim.owner)
        try:
            new = self.mailbox.put_if_match(key, mine.to_bytes(), version)
        except OutcomeUnknownError:
            current = self.read(producer, seq)
            if current is None or current[0].token != mine.token:
                return None  # ours did not land (nothing else writes our token)
            new = current[1]
        if new is None:
            return None
        self.claimed += 1
        return HeldItem(producer, seq, mine, new)

    def deliver(self, held: HeldItem, *, failed: bool = False) -> None:
        """Record that ``next()`` returned ``held``'s item (or, with ``failed``, its error).

        Costs one ``put_if_match`` (a plain ``put`` without compare-and-swap).

        Raises:
            LeaseLostError: another consumer took the item over first (this one was declared
                lost, or a newer incarnation with its id started).
            OutcomeUnknownError: the store could not tell, three times, whether the write
                landed.
        """
        body = replace(held.claim, state=FAILED if failed else DELIVERED).to_bytes()
        if not self.cas:
            self.mailbox.put(held.key, body)
            self.delivered += 1
            return
        version = held.version
        assert version is not None
        for attempt in range(_DELIVERY_ATTEMPTS):
            try:
                new = self.mailbox.put_if_match(held.key, body, version)
            except OutcomeUnknownError:
                current = self.read(held.producer, held.seq)
                if current is not None and current[0].token == held.claim.token:
                    if current[0].settled:
                        break  # ours landed
                    version = current[1] or version
                    if attempt + 1 < _DELIVERY_ATTEMPTS:
                        continue  # ours did not land: try again
                    raise
                new = None  # another consumer's claim: taken over
            if new is None:
                raise self._taken(held)
            break
        self.delivered += 1

    def _taken(self, held: HeldItem) -> LeaseLostError:
        current = self.read(held.producer, held.seq)
        by = "another consumer" if current is None else repr(current[0].owner)
        return LeaseLostError(
            f"consumer {self.owner!r} lost item {held.describe()} before its delivery was "
            f"recorded: {by} took it over, because this consumer's lease lapsed (was it "
            "paused, or cut off from the store?) or a newer consumer with the same id "
            "started; that item may be delivered twice, and this consumer returns no more",
            learner=self.owner,
        )
