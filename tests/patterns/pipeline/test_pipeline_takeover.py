"""Pipeline over a mailbox: delivery records and takeovers, end to end.

What a user relies on, seen through ``Pipeline`` and the store: when ``next()`` returns an
item, the one it returned before is recorded delivered; an item taken over before its
delivery record landed fails its consumer instead of being delivered twice; a consumer
that takes over another's items gets them in the order their owner claimed them; and a
consumer waiting for a live owner to return an item reads that owner's lease once a
renewal period, not on every poll. On ``memory://`` and ``file://``: each mechanism is
gradientmail's own, above the Mailbox interface. The unit tests of each part are in
``test_delivery_recorder.py``, ``test_item_claims.py`` and ``test_undelivered.py``.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import pytest

from gradientmail import LeaseLostError, Mailbox
from gradientmail.patterns.pipeline import Pipeline
from gradientmail.patterns.pipeline._item_claims import ItemClaims
from gradientmail.patterns.pipeline._records import (
    CLAIMED,
    DELIVERED,
    ItemClaim,
    claim_key,
    consumer_lease_key,
)
from tests.support.delegating import Delegating
from tests.support.polling import wait_until

JOIN = 30.0
CLAIMS = "claims/"


@pytest.fixture
def box(local_box: Mailbox) -> Mailbox:
    return local_box


def produce(pipe: Any, count: int) -> None:
    """Producer ``a`` puts ``count`` items, then ends."""
    with pipe.producer("a") as out:
        for n in range(count):
            out.put(b"%d" % n)


def claim_of(box: Mailbox, seq: int) -> ItemClaim:
    claim = ItemClaim.read(box, claim_key("a", seq))
    assert claim is not None, f"item a#{seq} was never claimed"
    return claim


class HeldRecords(Delegating):
    """Holds each delivery record until the consumer is asked for its next item (or
    closes), and logs when each one lands."""

    def __init__(self, inner: Mailbox) -> None:
        super().__init__(inner)
        self.asked = threading.Semaphore(0)
        self.log: list[tuple[str, int]] = []

    def put_if_match(self, key: str, *args: Any, **kwargs: Any) -> Any:
        if not key.startswith(CLAIMS):
            return self.inner.put_if_match(key, *args, **kwargs)
        assert self.asked.acquire(timeout=JOIN), "the record was never let through"
        result = self.inner.put_if_match(key, *args, **kwargs)
        self.log.append(("landed", int(key.rsplit("/", 1)[1])))
        return result


def test_when_next_returns_an_item_the_one_before_it_is_recorded_delivered(box: Mailbox) -> None:
    """At most one delivery is unrecorded at any time: the one ``next()`` returned last. A
    consumer that dies while working on an item can lose only that item to a takeover."""
    held = HeldRecords(box)
    pipe = Pipeline.over_mailbox(held, ["a"], prefetch=3, stall_timeout=60)  # type: ignore[arg-type]
    produce(pipe, 6)
    with pipe.consumer("c") as items:
        for n in range(6):
            if n:
                held.asked.release()  # asked for item n: the record of n - 1 may land now
            assert next(items) == b"%d" % n
            held.log.append(("returned", n))
        held.asked.release()  # closing: the last record lands
    for n in range(1, 6):
        assert held.log.index(("landed", n - 1)) < held.log.index(("returned", n)), held.log
    assert all(claim_of(box, n).state == DELIVERED for n in range(6))


class TakenOverFirst(Delegating):
    """Before the delivery record of item a#0 reaches the store, consumer ``c2`` takes the
    item over (as it would once it declared this consumer lost)."""

    def __init__(self, inner: Mailbox) -> None:
        super().__init__(inner)
        self.taker = ItemClaims(inner, "c2", 1)
        self.taken = threading.Event()

    def put_if_match(self, key: str, *args: Any, **kwargs: Any) -> Any:
        if key == claim_key("a", 0) and not self.taken.is_set():
            self.taken.set()
            found = self.taker.read("a", 0)
            assert found is not None
            assert found[1] is not None
            assert self.taker.take_over("a", 0, found[0], found[1]) is not None
        return self.inner.put_if_match(key, *args, **kwargs)


def test_an_item_taken_over_before_its_delivery_record_landed_fails_the_consumer(
    box: Mailbox,
) -> None:
    """The consumer learns it from its record, and its next ``next()`` raises
    ``LeaseLostError`` naming the item and the taker instead of returning more: the item
    may go twice, and the user is told so, never silently."""
    wrapped = TakenOverFirst(box)
    pipe = Pipeline.over_mailbox(wrapped, ["a"], prefetch=2, stall_timeout=60)  # type: ignore[arg-type]
    produce(pipe, 4)
    with pipe.consumer("c1") as items:
        assert next(items) == b"0"
        with pytest.raises(LeaseLostError, match=r"'c1' lost item a#0 .*'c2' took it over"):
            next(items)
        with pytest.raises(StopIteration):
            next(items)
    assert wrapped.taken.is_set()
    claim = claim_of(box, 0)
    assert (claim.owner, claim.state, claim.taken_from) == ("c2", CLAIMED, "c1")


def test_a_closed_consumers_items_are_taken_over_in_the_order_it_claimed_them(
    box: Mailbox,
) -> None:
    """The leaver returned one item and had claimed four more; the stayer takes those over
    lowest claim first, so a producer's items still reach it in the order they were put."""
    produce(Pipeline.over_mailbox(box, ["a"]), 12)
    decoded = threading.Semaphore(0)

    def decode(data: bytes) -> bytes:
        decoded.release()
        return data

    leaving = Pipeline.over_mailbox(box, ["a"], prefetch=4, stall_timeout=60)
    with leaving.consumer("leaver", decode=decode) as items:
        assert next(items) == b"0"
        for _ in range(5):  # the item returned, and four claimed and not returned
            assert decoded.acquire(timeout=JOIN)
    staying = Pipeline.over_mailbox(box, ["a"], prefetch=1, stall_timeout=60)
    with staying.consumer("stayer") as items:
        rest = [int(item) for item in items]
    assert Counter(rest) == Counter(range(1, 12)), "each item once"
    taken = [seq for seq in rest if claim_of(box, seq).taken_from == "leaver"]
    assert len(taken) >= 4, taken
    assert taken == sorted(taken), f"taken over out of the order they were claimed: {taken}"


class CountedReads(Delegating):
    """Counts the reads of each key."""

    def __init__(self, inner: Mailbox) -> None:
        super().__init__(inner)
        self.reads: Counter[str] = Counter()

    def get(self, key: str) -> bytes:
        self.reads[key] += 1
        return self.inner.get(key)

    def get_versioned(self, key: str) -> Any:
        self.reads[key] += 1
        return self.inner.get_versioned(key)


def test_a_consumer_waiting_for_a_live_owners_item_reads_its_lease_once_a_period(
    box: Mailbox,
) -> None:
    """Every producer has ended; the owner holds the last item, prefetched and not returned.
    The waiter reads that item's claim at each poll, to stop as soon as it is delivered, but
    the owner's lease once per renewal period: a lease read on every poll would multiply
    the requests of every waiting consumer. Once the owner returns the item, the waiter
    ends with nothing."""
    options: dict[str, Any] = {
        "heartbeat_interval": 20.0,
        "lease": 60.0,
        "poll_interval": 0.01,
        "stall_timeout": None,
    }
    produce(Pipeline.over_mailbox(box, ["a"]), 1)
    owning = Pipeline.over_mailbox(box, ["a"], prefetch=1, **options)
    counted = CountedReads(box)
    waiting = Pipeline.over_mailbox(counted, ["a"], prefetch=1, **options)  # type: ignore[arg-type]
    with owning.consumer("owner") as owned:
        wait_until(lambda: ItemClaim.read(box, claim_key("a", 0)), JOIN, "a claim", 0.005)
        with waiting.consumer("waiter") as items:
            wait_until(lambda: counted.reads[claim_key("a", 0)] >= 20, JOIN, "polls", 0.005)
            assert counted.reads[consumer_lease_key("owner")] <= 1, counted.reads
            assert next(owned) == b"0"
            assert list(items) == []
    assert claim_of(box, 0).state == DELIVERED
