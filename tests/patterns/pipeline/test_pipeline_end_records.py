"""A producer's end record carries its count: consumers finish at the count, never at the end.

A consumer reads a producer's end record only when the next item is missing. The producer
may write that item, and then its end, between the two reads; so seeing the end proves
nothing until the cursor has reached the count the end states. These tests steer that
interleaving every time (a mailbox wrapper holds the consumer between its missed read and
its read of the end, while the producer finishes), and check the two ways an end record can
contradict the items stored: an item it counts is missing, or it states no count at all.
Each runs on every backend.
"""

from __future__ import annotations

import threading

import pytest

from gradientmail import KeyNotFoundError, Mailbox
from gradientmail.patterns.pipeline import Pipeline, PipelineError, PipelineStalledError
from gradientmail.patterns.pipeline._records import end_key, item_key
from tests.support.delegating import Delegating
from tests.support.pipeline_workers import FAST, JOIN, payload
from tests.support.rigs import Rig

pytestmark = pytest.mark.timeout(120)


class MissThenWait(Delegating):
    """The first time ``key`` is read and found missing, let the test act before raising.

    Sets ``missed`` and waits for ``acted``: whatever the test writes meanwhile lands between
    this read and the consumer's next one, as a producer racing the consumer would.
    """

    def __init__(self, inner: Mailbox, key: str) -> None:
        super().__init__(inner)
        self.key = key
        self.missed = threading.Event()
        self.acted = threading.Event()

    def get(self, key: str) -> bytes:
        try:
            return bytes(self.inner.get(key))
        except KeyNotFoundError:
            if key == self.key and not self.missed.is_set():
                self.missed.set()
                assert self.acted.wait(JOIN), "the test never finished the producer"
            raise


def _pipe(box: object, **options: object) -> Pipeline[bytes]:
    settings: dict[str, object] = {"stall_timeout": 30, **FAST, **options}
    return Pipeline.over_mailbox(box, ["p"], **settings)  # type: ignore[arg-type]


def test_items_written_between_a_missed_read_and_the_end_record_are_all_delivered(
    rig: Rig,
) -> None:
    """The end is read after item 2 was missed, but counts 5: items 2-4 must still come."""
    box = rig.fresh()
    producer = _pipe(box).producer("p")
    producer.put(payload("p", 0))
    producer.put(payload("p", 1))
    steered = MissThenWait(box, item_key("p", 2))
    with _pipe(steered, prefetch=8).consumer("c") as items:
        assert steered.missed.wait(JOIN), "the consumer never looked for item 2"
        # The consumer has just found item 2 missing; before it reads the end record, the
        # producer writes its last items and ends with a count of 5.
        for seq in range(2, 5):
            producer.put(payload("p", seq))
        producer.done()
        steered.acted.set()
        got = list(items)
    assert got == [payload("p", seq) for seq in range(5)]


def test_an_item_missing_although_the_end_record_counts_it_is_a_pipeline_error(
    rig: Rig,
) -> None:
    box = rig.fresh()
    with _pipe(box).producer("p") as producer:
        for seq in range(3):
            producer.put(payload("p", seq))
    box.delete(item_key("p", 1))  # the mailbox was edited: the end still counts 3 items
    got: list[bytes] = []
    with (
        pytest.raises(PipelineError) as caught,
        _pipe(box).consumer("c") as items,
    ):
        got.extend(items)
    assert got == [payload("p", 0)], "the items before the gap are delivered first"
    assert not isinstance(caught.value, PipelineStalledError), "raised at once, not a stall"
    message = str(caught.value)
    assert "item #1 of producer 'p' is missing" in message
    assert "end record counts 3 items" in message


def test_an_end_record_without_a_count_is_a_pipeline_error_naming_the_producer(
    rig: Rig,
) -> None:
    box = rig.fresh()
    _pipe(box)  # the manifest
    for seq in range(2):
        assert box.put_if_absent(item_key("p", seq), payload("p", seq))
    # Something other than the producer wrote its end record, without the count.
    assert box.put_if_absent(end_key("p"), b'{"status":"done","by":"p","token":null}')
    got: list[bytes] = []
    with (
        pytest.raises(PipelineError) as caught,
        _pipe(box).consumer("c") as items,
    ):
        got.extend(items)
    assert got == [payload("p", 0), payload("p", 1)]
    assert not isinstance(caught.value, PipelineStalledError), "raised at once, not a stall"
    message = str(caught.value)
    assert "'producers/p/end'" in message
    assert "field 'count' is missing" in message
