"""A learner with nothing free to claim: what it may do while its own units are unrecorded.

An idle marker tells the others "this learner holds nothing": once every leased learner is
marked, the leader lists ``done/`` to end the epoch. So a learner must not mark itself idle
while a unit it finished still waits for its completion record.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from gradientmail import Mailbox
from gradientmail.patterns.shared_queue import shared_queue
from gradientmail.patterns.shared_queue._holdings import Holdings
from tests.support.delegating import Delegating


@pytest.fixture
def box(local_box: Mailbox) -> Mailbox:
    return local_box


class HoldsTheRecord(Delegating):
    """Holds every ``done/`` record until released; notes idle markers created meanwhile."""

    def __init__(self, inner: Mailbox) -> None:
        super().__init__(inner)
        self.release = threading.Event()
        self.recording = threading.Event()  # the record is being written, and held
        self.decided = threading.Event()  # the loader reached its idle decision
        self.idle_while_held: list[str] = []
        self.holdings: Holdings | None = None

    def put_if_absent(self, key: str, data: Any) -> bool:
        if key.startswith("done/"):
            self.recording.set()
            assert self.release.wait(60), "the test never released the record"
        elif key.startswith("idle/") and not self.release.is_set():
            self.idle_while_held.append(key)
            self.decided.set()
        return bool(self.inner.put_if_absent(key, data))


def test_no_idle_marker_while_a_finished_unit_awaits_its_record(
    box: Mailbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = HoldsTheRecord(box)
    original = Holdings.wait_at_most

    def wait_at_most(self: Holdings, limit: int) -> bool:
        if limit == 0 and not held.release.is_set():
            held.holdings = self
            held.decided.set()  # about to wait for its own units before marking idle
        return original(self, limit)

    monkeypatch.setattr(Holdings, "wait_at_most", wait_at_most)
    got: list[int] = []

    def learner() -> None:
        with shared_queue({"u0": 0}, mailbox=held, learner_id="a", load=lambda u: [u]) as q:  # type: ignore[arg-type]
            got.extend(q)

    thread = threading.Thread(target=learner)
    thread.start()
    try:
        assert held.decided.wait(60), "the loader never reached its idle decision"
        assert held.recording.wait(60), "the completion was never recorded"
        assert held.idle_while_held == [], "marked idle while its unit's record was pending"
        assert held.holdings is not None
        assert held.holdings.identifiers() == {"u0"}, "the unit left the holdings unrecorded"
    finally:
        held.release.set()
        thread.join(timeout=60)
    assert not thread.is_alive()
    assert got == [0]
