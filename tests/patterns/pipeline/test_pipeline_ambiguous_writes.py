"""A pipeline over a store that cannot always say whether a write landed: the manifest, the
registration, every item, the end record and the abort record are each ambiguous once, and
each is settled by reading it back (our bytes, or for the abort any record), so producers
and consumers survive and every item arrives exactly once. ``local_box`` (memory and file)
suffices: the settling is gradientmail's own, above the Mailbox interface."""

from __future__ import annotations

import threading

import pytest

from gradientmail import Mailbox
from gradientmail.patterns.pipeline import Pipeline
from gradientmail.patterns.pipeline._records import ABORTED_KEY, Aborted
from tests.support.ambiguous import Ambiguous

ITEMS = [f"item-{i}".encode() for i in range(12)]


@pytest.mark.parametrize("stored", [True, False], ids=["response-lost", "request-lost"])
def test_every_record_and_item_settled_and_each_item_arrives_once(
    local_box: Mailbox, stored: bool
) -> None:
    lossy = Ambiguous(local_box, ("pipeline", "producers/", "items/"), stored=stored)
    # A short lease: a producer that died without its end record fails the run soon.
    pipe = Pipeline.over_mailbox(lossy, ["p0"], capacity=32, lease=5, heartbeat_interval=1)  # type: ignore[arg-type]
    errors: list[BaseException] = []

    def produce() -> None:
        try:
            with pipe.producer("p0") as out:
                for item in ITEMS:
                    out.put(item)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    producer = threading.Thread(target=produce)
    producer.start()
    with pipe.consumer("c0") as items:
        got = list(items)
    producer.join(timeout=60)
    assert errors == []
    assert got == ITEMS
    kinds = lossy.kinds
    assert ("create", "pipeline") in kinds
    assert ("create", "producers/p0/registered") in kinds
    assert ("create", "producers/p0/end") in kinds
    assert sum(kind == "create" and key.startswith("items/") for kind, key in kinds) == len(ITEMS)


@pytest.mark.parametrize("stored", [True, False], ids=["response-lost", "request-lost"])
def test_an_ambiguous_abort_record_still_aborts(local_box: Mailbox, stored: bool) -> None:
    lossy = Ambiguous(local_box, ("aborted",), stored=stored)
    pipe = Pipeline.over_mailbox(lossy, ["p0"])  # type: ignore[arg-type]
    pipe.abort("stopped by the test")  # settled: it neither raises nor leaves no record
    assert ("create", "aborted") in lossy.kinds
    record = Aborted.read(local_box, ABORTED_KEY)
    assert record is not None
    assert record.reason == "stopped by the test"
