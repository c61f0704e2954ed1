"""Prefetch is bounded: a background thread runs at most ``prefetch`` items ahead of its consumer.

The bound is what keeps a slow consumer's memory flat and, over a mailbox, leaves the items
it has not claimed to faster consumers. It rests on :class:`HandoffBuffer`: ``put`` and
``wait_for_room`` block at ``capacity`` counted entries. Here the consumer takes nothing
while the background thread fills the buffer, until the thread is seen blocked on the full
buffer (:attr:`HandoffBuffer.waiting_for_room`). From then on it can make nothing more until
the consumer takes an item, so what it has pulled at that moment is all it pulls: exactly
the bound. A thread that ignores the bound by one has pulled one more by the time it blocks.
Pattern tests run on every backend.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import pytest

from gradientmail import Mailbox
from gradientmail.patterns._workers import Bell, HandoffBuffer
from gradientmail.patterns.pipeline import Pipeline
from gradientmail.patterns.pipeline import _mailbox_consumer as mailbox_consumer
from gradientmail.patterns.shared_queue import _epoch as shared_queue_module
from gradientmail.patterns.shared_queue import shared_queue
from tests.support.pipeline_workers import FAST, payload

pytestmark = pytest.mark.timeout(120)

#: Seconds a condition that must come true is given (it takes milliseconds when correct).
BOUND = 30.0
#: Seconds between two looks at a condition that nothing notifies.
POLL = 0.005


def _eventually(condition: Callable[[], bool], what: str) -> None:
    """Wait until ``condition()`` holds; fail after BOUND s."""
    deadline = time.monotonic() + BOUND
    while not condition():
        assert time.monotonic() < deadline, f"not within {BOUND} s: {what}"
        time.sleep(POLL)


def _recorded_buffers(monkeypatch: pytest.MonkeyPatch, module: ModuleType) -> list[Any]:
    """Every HandoffBuffer ``module`` makes from now on (real ones, only recorded)."""
    made: list[HandoffBuffer[Any]] = []

    def make(capacity: int, bell: Bell | None = None) -> HandoffBuffer[Any]:
        made.append(HandoffBuffer(capacity, bell))
        return made[-1]

    monkeypatch.setattr(module, "HandoffBuffer", make)
    return made


def _stops_at(buffer: HandoffBuffer[Any], count: Callable[[], int], bound: int) -> None:
    """The producer ends up blocked on the full ``buffer`` with ``count()`` exactly ``bound``.

    The wait also ends as soon as ``count()`` passes the bound, so a producer that overruns
    it fails here at once rather than after BOUND s.
    """
    _eventually(
        lambda: buffer.waiting_for_room > 0 or count() > bound,
        f"the producer blocked on the full buffer (count {count()}, bound {bound})",
    )
    assert count() == bound, "pulled when it blocked for want of room"
    assert buffer.waiting_for_room == 1


def test_a_full_handoff_buffer_blocks_put_and_wait_for_room() -> None:
    buffer: HandoffBuffer[int] = HandoffBuffer(2)
    assert buffer.put(1)
    assert buffer.put_control("marker"), "control entries do not count against capacity"
    assert buffer.put(2)
    assert buffer.waiting_for_room == 0
    done = threading.Event()

    def put_third() -> None:
        buffer.wait_for_room()
        buffer.put(3)
        done.set()

    thread = threading.Thread(target=put_third, name="third")
    thread.start()
    _eventually(lambda: buffer.waiting_for_room > 0 or done.is_set(), "the third put blocked")
    assert not done.is_set(), "a third entry went into a buffer of capacity 2"
    assert len(buffer) == 2
    assert buffer.get()[0] == 1
    assert done.wait(BOUND), "room was made, but the waiting put never ran"
    thread.join(BOUND)
    assert buffer.waiting_for_room == 0
    assert [buffer.get()[0] for _ in range(3)] == ["marker", 2, 3]


def test_a_shared_queue_loader_pulls_at_most_prefetch_items_ahead(
    box: Mailbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    buffers = _recorded_buffers(monkeypatch, shared_queue_module)
    prefetch = 3
    pulled = 0
    changed = threading.Condition()

    def load(unit: str) -> Iterator[str]:
        nonlocal pulled
        for k in range(20):
            with changed:
                pulled += 1
                changed.notify_all()
            yield f"{unit}-{k}"

    with shared_queue({"u": "u"}, mailbox=box, learner_id="l", load=load, prefetch=prefetch) as q:
        (buffer,) = buffers
        _stops_at(buffer, lambda: pulled, prefetch)
        assert next(q) == "u-0"
        # Once it has pulled again it has left its earlier wait (the count drops under the
        # buffer's lock before the wait returns), so a waiter seen next is the new one.
        with changed:
            assert changed.wait_for(lambda: pulled > prefetch, timeout=BOUND), pulled
        _stops_at(buffer, lambda: pulled, prefetch + 1)


def test_a_pipeline_consumer_claims_at_most_prefetch_items_ahead(
    box: Mailbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    buffers = _recorded_buffers(monkeypatch, mailbox_consumer)
    prefetch = 2
    pipe = Pipeline.over_mailbox(box, ["p"], stall_timeout=30, **FAST)
    with pipe.producer("p") as producer:
        for seq in range(8):
            producer.put(payload("p", seq))
    decoded = 0
    changed = threading.Condition()

    def decode(data: bytes) -> bytes:
        # Runs on the prefetch thread right after each claim, before the item is buffered.
        nonlocal decoded
        with changed:
            decoded += 1
            changed.notify_all()
        return data

    consumer = Pipeline.over_mailbox(box, ["p"], prefetch=prefetch, **FAST).consumer(
        "c", decode=decode
    )
    with consumer as items:
        (buffer,) = buffers
        _stops_at(buffer, lambda: decoded, prefetch)
        assert len(list(box.list("claims/p/"))) == prefetch, "claimed only what it prefetched"
        assert next(items) == payload("p", 0)
        with changed:  # as above: a waiter seen after this is the new one
            assert changed.wait_for(lambda: decoded > prefetch, timeout=BOUND), decoded
        _stops_at(buffer, lambda: decoded, prefetch + 1)
        assert len(list(box.list("claims/p/"))) == prefetch + 1
