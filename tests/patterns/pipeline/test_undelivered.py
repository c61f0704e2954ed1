"""``Undelivered``: the claims of other consumers a consumer passed and has not seen
delivered, and the takeover of a dead owner's.

Driven directly, with a stand-in for the item claims and for the lease watcher, so each
rule is checked exactly: an owner returns its items in claim order, so a claim of it
numbered below the highest ``delivered_before`` seen was delivered and is forgotten; a live
owner is observed at most once per renewal period; a dead owner's claims are taken lowest
number first, and an item it delivered meanwhile is never taken; without compare-and-swap
a dead owner's undelivered items raise, naming them.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from gradientmail import PipelineError
from gradientmail.patterns._lease_watch import LeaseState
from gradientmail.patterns.pipeline._item_claims import HeldItem
from gradientmail.patterns.pipeline._records import CLAIMED, DELIVERED, ItemClaim
from gradientmail.patterns.pipeline._takeover import Undelivered

PERIOD = 5.0


def claim(n: int, *, owner: str = "other", state: str = CLAIMED, before: int = 0) -> ItemClaim:
    return ItemClaim(
        owner=owner,
        token=f"t{n}",
        claimed_at=0.0,
        incarnation=1,
        n=n,
        delivered_before=before,
        state=state,
    )


class Claims:
    """Stands in for ``ItemClaims``: the store's claims by (producer, seq)."""

    owner = "me"
    incarnation = 1

    def __init__(self, cas: bool = True) -> None:
        self.cas = cas
        self.stored: dict[tuple[str, int], ItemClaim] = {}
        self.taken: list[tuple[str, int]] = []
        self.reads: list[tuple[str, int]] = []

    def read(self, producer: str, seq: int) -> tuple[ItemClaim, str] | None:
        self.reads.append((producer, seq))
        found = self.stored.get((producer, seq))
        return None if found is None else (found, "v")

    def take_over(self, producer: str, seq: int, old: ItemClaim, version: Any) -> HeldItem | None:
        if self.stored[(producer, seq)] != old:
            return None
        new = replace(old, owner=self.owner, taken_from=old.owner)
        self.stored[(producer, seq)] = new
        self.taken.append((producer, seq))
        return HeldItem(producer, seq, new, None)


class Watcher:
    """Stands in for the lease watcher: each holder alive or dead, observations counted."""

    def __init__(self) -> None:
        self.dead: set[str] = set()
        self.observed: list[str] = []

    def observe(self, holder: str) -> LeaseState:
        self.observed.append(holder)
        dead = holder in self.dead
        return LeaseState(holder, "lost" if dead else "running", 1, dead)

    def declare_if_dead(self, observed: LeaseState, by: str) -> bool:
        return observed.dead


def undelivered(claims: Claims, watcher: Watcher) -> Undelivered:
    return Undelivered(claims, watcher, PERIOD)  # type: ignore[arg-type]


def note(pending: Undelivered, claims: Claims, seq: int, record: ItemClaim) -> None:
    claims.stored[("p", seq)] = record
    pending.note("p", seq, record)


def test_own_claims_and_settled_claims_of_unknown_owners_are_not_noted() -> None:
    claims, watcher = Claims(), Watcher()
    pending = undelivered(claims, watcher)
    note(pending, claims, 0, claim(0, owner="me"))
    note(pending, claims, 1, claim(1, state=DELIVERED))
    assert not pending


def test_a_later_claim_of_the_owner_forgets_the_ones_it_shows_delivered() -> None:
    claims, watcher = Claims(), Watcher()
    pending = undelivered(claims, watcher)
    for n in range(3):
        note(pending, claims, n, claim(n))
    assert "p#0" in pending.describe()
    note(pending, claims, 3, claim(3, before=2))  # claims 0 and 1 were delivered
    assert "p#0" not in pending.describe()
    assert "p#1" not in pending.describe()
    assert "p#2" in pending.describe()
    note(pending, claims, 4, claim(4, state=DELIVERED))  # claims 0 to 4 were delivered
    assert not pending


def test_a_live_owner_is_observed_once_a_period_and_its_items_are_left() -> None:
    claims, watcher = Claims(), Watcher()
    pending = undelivered(claims, watcher)
    note(pending, claims, 0, claim(0))
    assert pending.take_one(100.0, at_end=False) is None
    assert pending.take_one(100.0 + PERIOD - 0.01, at_end=False) is None
    assert watcher.observed == ["other"]
    assert pending.take_one(100.0 + PERIOD, at_end=False) is None
    assert watcher.observed == ["other", "other"]
    assert claims.taken == []


def test_a_dead_owners_items_are_taken_lowest_number_first_and_delivered_ones_never() -> None:
    claims, watcher = Claims(), Watcher()
    pending = undelivered(claims, watcher)
    for n in (2, 0, 1):
        note(pending, claims, n, claim(n))
    claims.stored[("p", 1)] = claim(1, state=DELIVERED)  # returned just before it died
    watcher.dead.add("other")
    first = pending.take_one(100.0, at_end=False)
    second = pending.take_one(100.0, at_end=False)
    assert (first and first.seq, second and second.seq) == (0, 2)
    assert pending.take_one(100.0, at_end=False) is None
    assert claims.taken == [("p", 0), ("p", 2)]
    assert not pending


def test_at_the_end_a_live_owners_claims_are_read_again_and_delivered_ones_forgotten() -> None:
    claims, watcher = Claims(), Watcher()
    pending = undelivered(claims, watcher)
    note(pending, claims, 0, claim(0))
    claims.stored[("p", 0)] = claim(0, state=DELIVERED)
    assert pending.take_one(100.0, at_end=False) is None
    assert pending, "read again before the end"
    assert pending.take_one(100.0, at_end=True) is None
    assert not pending


def test_at_the_end_claims_a_later_claim_shows_delivered_are_not_read_again() -> None:
    """The owner's claim 3 says it had delivered 3 items when it made it: claims 0 to 2 were
    delivered, and waiting for the end costs one read of claim 3 per poll, not of each
    claim passed."""
    claims, watcher = Claims(), Watcher()
    pending = undelivered(claims, watcher)
    for n in range(3):
        note(pending, claims, n, claim(n))
    note(pending, claims, 3, claim(3, before=3))
    for n in range(3):  # what the store holds now: the owner returned them
        claims.stored[("p", n)] = claim(n, state=DELIVERED)
    assert pending.take_one(100.0, at_end=True) is None
    assert pending.take_one(100.0, at_end=True) is None
    assert claims.reads == [("p", 3), ("p", 3)]
    assert pending.describe() == "other (alive): p#3"
    claims.stored[("p", 3)] = claim(3, state=DELIVERED, before=3)
    assert pending.take_one(100.0, at_end=True) is None
    assert not pending  # every claim passed is delivered: the consumer may stop


def test_without_compare_and_swap_a_dead_owners_items_raise_naming_them() -> None:
    claims, watcher = Claims(cas=False), Watcher()
    pending = undelivered(claims, watcher)
    note(pending, claims, 7, claim(7))
    watcher.dead.add("other")
    with pytest.raises(PipelineError, match=r"p#7.*no compare-and-swap"):
        pending.take_one(100.0, at_end=False)
