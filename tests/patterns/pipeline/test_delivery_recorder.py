"""A consumer's delivery records, written by a background thread (``DeliveryRecorder``).

``next()`` hands the item it returns to the recorder and, before it returns the next one,
waits for that record: at most one delivery is unrecorded at any time, records land in the
order the items were returned, and a record that failed is raised by the next ``wait()``
(or returned by ``close()``), never lost. The claims object is a stand-in that records
what the recorder asked of it, so each of these is checked exactly.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from gradientmail import BackendError
from gradientmail.patterns.pipeline._deliveries import DeliveryRecorder
from gradientmail.patterns.pipeline._stats import ConsumerStats

JOIN = 30


class Claims:
    """Stands in for ``ItemClaims``: notes each delivery; may fail one, or hold one."""

    def __init__(self) -> None:
        self.delivered: list[tuple[Any, bool]] = []
        self.fail: set[Any] = set()
        self.hold = threading.Event()
        self.hold.set()
        self.entered = threading.Event()

    def deliver(self, held: Any, *, failed: bool = False) -> None:
        self.entered.set()
        assert self.hold.wait(JOIN)
        if held in self.fail:
            raise BackendError(f"the store refused the record of {held}")
        self.delivered.append((held, failed))


def recorder(claims: Claims) -> DeliveryRecorder:
    return DeliveryRecorder(claims, ConsumerStats(), "test-deliveries")  # type: ignore[arg-type]


def in_flight(claims: Claims, item: str) -> DeliveryRecorder:
    """A recorder whose record of ``item`` is inside ``deliver`` and held there."""
    claims.hold.clear()
    deliveries = recorder(claims)
    deliveries.record(item)  # type: ignore[arg-type]
    assert claims.entered.wait(JOIN)
    return deliveries


def test_records_land_in_order_and_wait_returns_once_they_have() -> None:
    claims = Claims()
    deliveries = recorder(claims)
    try:
        for item in ("a#0", "a#1", "b#0"):
            deliveries.record(item, failed=item == "b#0")  # type: ignore[arg-type]
            deliveries.wait()
            assert claims.delivered[-1] == (item, item == "b#0")
        assert [held for held, _ in claims.delivered] == ["a#0", "a#1", "b#0"]
    finally:
        assert deliveries.close() is None


def test_wait_blocks_until_the_record_in_flight_has_landed() -> None:
    claims = Claims()
    deliveries = in_flight(claims, "a#0")
    waited = threading.Event()

    def wait() -> None:
        deliveries.wait()
        waited.set()

    waiter = threading.Thread(target=wait)
    waiter.start()
    assert not waited.wait(0.2), "wait() returned before the record landed"
    assert claims.delivered == []
    claims.hold.set()
    waiter.join(JOIN)
    assert waited.is_set()
    assert claims.delivered == [("a#0", False)]
    assert deliveries.close() is None


def test_a_failed_record_is_raised_by_the_next_wait_once() -> None:
    claims = Claims()
    claims.fail.add("a#0")
    deliveries = recorder(claims)
    deliveries.record("a#0")  # type: ignore[arg-type]
    with pytest.raises(BackendError, match="a#0"):
        deliveries.wait()
    deliveries.wait()  # raised once, not again
    deliveries.record("a#1")  # type: ignore[arg-type]
    deliveries.wait()
    assert claims.delivered == [("a#1", False)]
    assert deliveries.close() is None


def test_close_lets_the_record_in_flight_land_and_returns_its_error() -> None:
    claims = Claims()
    claims.fail.add("a#0")
    deliveries = in_flight(claims, "a#0")
    claims.hold.set()
    error = deliveries.close()
    assert isinstance(error, BackendError)


def test_a_second_record_before_wait_is_refused() -> None:
    claims = Claims()
    deliveries = in_flight(claims, "a#0")
    try:
        with pytest.raises(AssertionError, match="wait"):
            deliveries.record("a#1")  # type: ignore[arg-type]
    finally:
        claims.hold.set()
        assert deliveries.close() is None
    assert claims.delivered == [("a#0", False)]
