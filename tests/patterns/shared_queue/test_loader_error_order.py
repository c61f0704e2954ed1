"""A background thread's error reaches the consumer only after every item buffered before it.

``shared_queue``'s loader and a mailbox pipeline consumer's prefetch thread both put their
failure into the same handoff buffer as their items. A consumer that starts reading only
after the error is queued must still get every earlier item first. These tests wait until
the background thread has ended (its worker object says so), so the error is certainly in
the buffer behind the items before the consumer takes anything: the order is the only
thing left to check. Each runs on every backend.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from gradientmail import Mailbox
from gradientmail._errors import WorkerError
from gradientmail.patterns._workers import Worker
from gradientmail.patterns.pipeline import Pipeline, ProducerFailedError
from gradientmail.patterns.shared_queue import shared_queue
from tests.support.pipeline_workers import FAST, JOIN, Boom, payload

pytestmark = pytest.mark.timeout(120)


def _wait_ended(worker: Worker | None) -> None:
    """Wait until a background worker has ended (bounded polling: it exits on its own)."""
    assert worker is not None, "the background thread was never started"
    deadline = time.monotonic() + JOIN
    pause = threading.Event()  # never set: wait() is the polling period
    while worker.is_alive():
        assert time.monotonic() < deadline, f"{worker.name} never ended"
        pause.wait(0.005)


@pytest.mark.parametrize("k", [0, 1, 3])
def test_a_load_error_queued_behind_items_arrives_after_them(box: Mailbox, k: int) -> None:
    def load(unit: str) -> Iterator[str]:
        for n in range(10):
            if n == k:
                raise Boom(f"item {n} of {unit}")
            yield f"{unit}-{n}"

    got: list[str] = []
    with (  # noqa: PT012 - the error arrives mid-loop
        pytest.raises(WorkerError) as caught,
        shared_queue({"u": "u"}, mailbox=box, learner_id="l", load=load, prefetch=16) as q,
    ):
        _wait_ended(q._open[0]._parts.loader if q._open else None)  # the error is in the buffer
        got.extend(q)
    assert got == [f"u-{n}" for n in range(k)]
    assert isinstance(caught.value.__cause__, Boom)
    assert f"item {k} of u" in str(caught.value)


def test_a_unit_that_fails_to_load_fails_after_the_previous_units_items(box: Mailbox) -> None:
    def load(unit: str) -> list[str]:
        if unit == "broken":
            raise Boom("cannot open the broken shard")
        return [f"{unit}-{n}" for n in range(3)]

    got: list[str] = []
    units = {"fine": "fine", "broken": "broken"}
    with (  # noqa: PT012 - the error arrives mid-loop
        pytest.raises(WorkerError) as caught,
        shared_queue(units, mailbox=box, learner_id="l", load=load, prefetch=16) as q,
    ):
        _wait_ended(q._open[0]._parts.loader if q._open else None)
        got.extend(q)
    assert got == ["fine-0", "fine-1", "fine-2"]
    assert isinstance(caught.value.__cause__, Boom)
    assert "unit 'broken'" in str(caught.value)


def test_a_producer_failure_prefetched_behind_its_items_arrives_after_them(box: Mailbox) -> None:
    pipe = Pipeline.over_mailbox(box, ["p"], stall_timeout=30, prefetch=8, **FAST)
    producer = pipe.producer("p")
    for seq in range(3):
        producer.put(payload("p", seq))
    producer.fail(Boom("the producer broke after 3 items"))
    got: list[bytes] = []
    with (  # noqa: PT012 - the error arrives mid-loop
        pytest.raises(ProducerFailedError) as caught,
        pipe.consumer("c") as items,
    ):
        _wait_ended(items._worker)  # type: ignore[attr-defined]  # its failure is queued
        got.extend(items)
    assert got == [payload("p", seq) for seq in range(3)]
    assert caught.value.producer == "p"
    assert caught.value.items == 3
