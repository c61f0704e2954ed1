"""Prefetch is bounded: a background thread runs at most ``prefetch`` items ahead of its consumer.

The bound is what keeps a slow consumer's memory flat and, over a mailbox, leaves the items
it has not claimed to faster consumers. It rests on :class:`HandoffBuffer`: ``put`` and
``wait_for_room`` block at ``capacity`` counted entries. Here the consumer takes nothing
while the background thread fills the buffer; once the thread has reached the bound it is
watched for a while to see that it goes no further (a thread that ignores the bound gets
there within milliseconds). Pattern tests run on every backend.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import pytest

from gradientmail import Mailbox
from gradientmail.patterns.pipeline import Pipeline
from gradientmail.patterns.shared_queue import shared_queue
from gradientmail.patterns.workers import HandoffBuffer
from tests.support.pipeline_workers import FAST, payload

pytestmark = pytest.mark.timeout(60)

#: Seconds a thread that reached the bound is watched; waiting is all it may do meanwhile.
WATCH = 0.3
BOUND = 10.0


def _reaches_then_stays(count: Callable[[], int], bound: int, changed: threading.Condition) -> None:
    """``count()`` reaches ``bound`` (within BOUND s) and stays there for WATCH s."""
    with changed:
        assert changed.wait_for(lambda: count() >= bound, timeout=BOUND), (count(), bound)
        assert not changed.wait_for(lambda: count() > bound, timeout=WATCH), (count(), bound)


def test_a_full_handoff_buffer_blocks_put_and_wait_for_room() -> None:
    buffer: HandoffBuffer[int] = HandoffBuffer(2)
    assert buffer.put(1)
    assert buffer.put_control("marker"), "control entries do not count against capacity"
    assert buffer.put(2)
    done = threading.Event()

    def put_third() -> None:
        buffer.wait_for_room()
        buffer.put(3)
        done.set()

    thread = threading.Thread(target=put_third, name="third")
    thread.start()
    assert not done.wait(WATCH), "a third entry went into a buffer of capacity 2"
    assert len(buffer) == 2
    assert buffer.get()[0] == 1
    assert done.wait(BOUND), "room was made, but the waiting put never ran"
    thread.join(BOUND)
    assert [buffer.get()[0] for _ in range(3)] == ["marker", 2, 3]


def test_a_shared_queue_loader_pulls_at_most_prefetch_items_ahead(box: Mailbox) -> None:
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
        _reaches_then_stays(lambda: pulled, prefetch, changed)
        assert next(q) == "u-0"
        _reaches_then_stays(lambda: pulled, prefetch + 1, changed)


def test_a_pipeline_consumer_claims_at_most_prefetch_items_ahead(box: Mailbox) -> None:
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
        _reaches_then_stays(lambda: decoded, prefetch, changed)
        assert len(list(box.list("claims/p/"))) == prefetch, "claimed only what it prefetched"
        assert next(items) == payload("p", 0)
        _reaches_then_stays(lambda: decoded, prefetch + 1, changed)
