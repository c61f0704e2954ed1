"""A pipeline consumer waits out a store outage shorter than its lease and loses nothing."""

from __future__ import annotations

import logging
import threading

import pytest

from gradientmail import Mailbox
from gradientmail.patterns.pipeline import Pipeline
from tests.support.outage import Outage

ITEMS = 12


@pytest.fixture
def box(local_box: Mailbox) -> Mailbox:
    """``memory://`` and ``file://``: the patience is gradientmail's own."""
    return local_box


def test_a_consumer_rides_out_an_outage_and_delivers_every_item_once(
    box: Mailbox, caplog: pytest.LogCaptureFixture
) -> None:
    outage = Outage(box)
    pipe = Pipeline.over_mailbox(outage, ["p"], capacity=ITEMS, prefetch=1, stall_timeout=60)  # type: ignore[arg-type]
    with pipe.producer("p") as out:
        for n in range(ITEMS):
            out.put(b"%d" % n)

    def end_outage() -> None:
        outage.failed.wait(30)
        outage.down.clear()

    ender = threading.Thread(target=end_outage)
    caplog.set_level(logging.INFO, logger="gradientmail.patterns._patience")
    got: list[bytes] = []
    with pipe.consumer("c") as items:
        for item in items:
            got.append(item)
            if len(got) == 1:
                outage.down.set()  # the prefetch thread, one item ahead, claims into it
                ender.start()
    ender.join()
    assert outage.failed.is_set(), "nothing called the store during the outage"
    assert sorted(got) == sorted(b"%d" % n for n in range(ITEMS))
    assert len(got) == len(set(got)), "an item was delivered twice"
    messages = [r.getMessage() for r in caplog.records]
    assert any("pipeline consumer 'c'" in m and "retrying for up to" in m for m in messages)
    assert any("answered" in m and "again" in m for m in messages)


def test_a_producer_and_a_consumer_that_start_during_an_outage_wait_for_the_store(
    box: Mailbox, caplog: pytest.LogCaptureFixture
) -> None:
    """The manifest, a producer's registration and each lease are written through the
    same patience as the prefetch thread: a start during an outage waits it out."""
    outage = Outage(box)

    def down_for_a_while() -> threading.Thread:
        """The store goes down until it has failed a few calls."""
        outage.failed.clear()
        outage.failures.clear()
        outage.down.set()

        def end_outage() -> None:
            outage.failed.wait(30)
            outage.down.clear()

        ender = threading.Thread(target=end_outage)
        ender.start()
        return ender

    caplog.set_level(logging.INFO, logger="gradientmail.patterns._patience")
    ender = down_for_a_while()
    pipe = Pipeline.over_mailbox(outage, ["p"], capacity=ITEMS, stall_timeout=60)  # type: ignore[arg-type]
    ender.join()
    ender = down_for_a_while()
    with pipe.producer("p") as out:
        ender.join()
        for n in range(ITEMS):
            out.put(b"%d" % n)
    ender = down_for_a_while()
    with pipe.consumer("c") as items:
        got = list(items)
    ender.join()
    assert sorted(got) == sorted(b"%d" % n for n in range(ITEMS))
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    for who in ("a pipeline handle", "producer 'p'", "lease 'leases/consumers/c'"):
        assert any(who in m and "retrying for up to" in m for m in messages), (who, messages)
    assert not any("giving up" in m for m in messages)
