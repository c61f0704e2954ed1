"""A pipeline consumer's fence, on a clock the test drives (no waits).

Before it returns an item, a consumer checks that no other consumer can have declared it
lost: inside its freshness window that costs no request, past it the consumer renews
first, and one that cannot renew returns nothing more.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from gradientmail import BackendError, LeaseLostError
from gradientmail.backends.memory import MemoryMailbox
from gradientmail.patterns._leases import SAFE_FRACTION
from gradientmail.patterns.pipeline import Pipeline
from tests.support.clock import FakeClock
from tests.support.delegating import Delegating

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
