"""A pipeline consumer's fence, on a clock the test drives (no waits).

Before it returns an item, a consumer checks that no other consumer can have declared it
lost: inside its freshness window that costs no request, past it the consumer renews
first, and one that cannot renew, or learns that it was declared lost, returns nothing
more. Its prefetch thread checks the same before it claims, so an idle consumer is fenced
too; either way the loop sees ``LeaseLostError``, never a store error of recording the stop.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from gradientmail import BackendError, LeaseLostError
from gradientmail.backends.memory import MemoryMailbox
from gradientmail.patterns._leases import SAFE_FRACTION, LeaseWatcher
from gradientmail.patterns.pipeline import Pipeline
from gradientmail.patterns.pipeline._records import CLAIMED, CONSUMER_LEASES, ItemClaim, claim_key
from tests.support.clock import FakeClock
from tests.support.delegating import Delegating
from tests.support.polling import wait_until

LEASE = 30.0


class FailingWrites(Delegating):
    """Fails every lease write, as a store that is down would; counts the tries."""

    tries = 0

    def put_if_match(self, *args: Any, **kwargs: Any) -> Any:
        self.tries += 1
        raise BackendError("the store is down (injected)")


def test_a_consumer_acts_inside_its_window_and_stops_once_stale_and_unable_to_renew(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The loop sees ``LeaseLostError``, not the store error of recording the stop (that
    is logged: the lease then expires, as after a crash)."""
    box = MemoryMailbox("pipeline-consumer-clock")
    pipe = Pipeline.over_mailbox(box, ["a"], prefetch=2, stall_timeout=60, lease=LEASE)
    with pipe.producer("a") as out:
        for n in range(8):  # more than the prefetch: the prefetch thread blocks, full
            out.put(b"%d" % n)
    with pipe.consumer("c") as items:
        assert next(items) == b"0"
        lease = items._lease  # type: ignore[attr-defined]
        clock = FakeClock(time.monotonic())  # the real clock's now, then moved by hand
        lease.clock = clock
        failing = FailingWrites(box)
        lease.mailbox = failing
        clock.advance(SAFE_FRACTION * LEASE - 1)
        assert next(items) == b"1", "a fresh consumer needs no write to return an item"
        assert failing.tries == 0
        # Items 2 and 3 are buffered and the prefetch thread waits for room, so it checks
        # no lease now: only next()'s own fence can keep item 2 from being returned.
        buffer = items._buffer  # type: ignore[attr-defined]
        deadline = time.monotonic() + 30
        while not (len(buffer) == 2 and buffer.waiting_for_room == 1):
            assert time.monotonic() < deadline, "the prefetch thread never filled its buffer"
            time.sleep(0.005)  # polling a state nothing notifies, not a synchronising wait
        clock.advance(2)
        with pytest.raises(LeaseLostError, match="could not renew"):
            next(items)
        assert failing.tries >= 1, "it did not try to renew before giving up"
        lease.mailbox = box  # the store is back, for the consumer's close
    assert any("could not record that it stopped" in r.getMessage() for r in caplog.records)


def full_buffer(items: Any) -> None:
    """Wait until the prefetch thread holds a full buffer and waits for room: it checks no
    lease then, so only ``next()``'s own fence stands between a fenced consumer and an item."""
    buffer = items._buffer

    def full() -> bool:
        return len(buffer) == buffer.capacity and buffer.waiting_for_room == 1

    wait_until(full, 30, "the prefetch thread to fill its buffer", 0.005)


def test_a_consumer_declared_lost_returns_none_of_the_items_it_has_buffered() -> None:
    """An observer saw the consumer's lease unchanged for a whole lease and declared it lost
    (on the same clock as the consumer's). The store works; the consumer's window has
    passed, so ``next()`` renews first, learns it was declared lost, and raises
    ``LeaseLostError`` rather than return an item that another consumer may take over."""
    box = MemoryMailbox(f"pipeline-consumer-declared-{uuid.uuid4().hex}")
    pipe = Pipeline.over_mailbox(box, ["a"], prefetch=2, stall_timeout=60, lease=LEASE)
    with pipe.producer("a") as out:
        for n in range(8):
            out.put(b"%d" % n)
    with pipe.consumer("c") as items:
        assert next(items) == b"0"
        clock = FakeClock(time.monotonic())
        items._lease.clock = clock  # type: ignore[attr-defined]
        full_buffer(items)
        observer = LeaseWatcher(box, CONSUMER_LEASES, duration=LEASE, clock=clock)
        deadline = time.monotonic() + 30
        while True:  # a renewal between two observations starts the watch again
            assert time.monotonic() < deadline, "the observer never saw the lease go silent"
            observer.observe("c")
            clock.advance(LEASE)
            if observer.declare_if_dead(observer.observe("c"), "an observer"):
                break
        with pytest.raises(LeaseLostError, match="declared lost by 'an observer'"):
            next(items)
        with pytest.raises(StopIteration):
            next(items)  # and nothing more
    claim = ItemClaim.read(box, claim_key("a", 1))
    assert claim is not None
    assert (claim.owner, claim.state) == ("c", CLAIMED)  # never returned: left to a takeover


def test_an_idle_consumer_fenced_by_its_prefetch_thread_raises_lease_lost_not_a_store_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Nothing is buffered: the prefetch thread, polling for the next item, finds its lease
    stale and cannot renew, and hands ``LeaseLostError`` to ``next()``. Recording the stop
    fails too (the store is down): that is logged, and the loop still sees the fence."""
    box = MemoryMailbox(f"pipeline-consumer-idle-{uuid.uuid4().hex}")
    pipe = Pipeline.over_mailbox(box, ["a"], prefetch=2, stall_timeout=60, lease=LEASE)
    producer = pipe.producer("a")  # it stays open: the consumer keeps polling for more
    try:
        producer.put(b"0")
        with pipe.consumer("c") as items:
            assert next(items) == b"0"
            lease = items._lease  # type: ignore[attr-defined]
            clock = FakeClock(time.monotonic())
            lease.clock = clock
            failing = FailingWrites(box)
            lease.mailbox = failing
            clock.advance(SAFE_FRACTION * LEASE + 1)
            with pytest.raises(LeaseLostError, match="could not renew"):
                next(items)
            assert failing.tries >= 2, "it did not try to renew, then to record its stop"
            lease.mailbox = box
    finally:
        producer.done()
    assert any("could not record that it stopped" in r.getMessage() for r in caplog.records)
