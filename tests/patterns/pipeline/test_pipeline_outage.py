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
