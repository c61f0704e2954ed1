"""Consumers end when every *declared* producer is done, not every registered one.

A producer that has not registered yet is indistinguishable from one that never will
before ``stall_timeout``; so a consumer that has taken every item of the producers that
did register must keep waiting, and take the late producer's items once it registers.
Each test first makes sure the consumer has looked at the unregistered producer and gone
on waiting (observed through an event or its waiting state, never a stall timeout), then
registers that producer. Mailbox tests run on every backend.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from gradientmail import KeyNotFoundError, Mailbox
from gradientmail.patterns.pipeline import Pipeline
from gradientmail.patterns.pipeline._records import end_key
from tests.support.delegating import Delegating
from tests.support.pipeline_workers import FAST, JOIN, payload
from tests.support.rigs import Rig

pytestmark = pytest.mark.timeout(120)


class WatchEnd(Delegating):
    """Sets ``looked_twice`` once ``key`` was read and found missing twice.

    A consumer reads a producer's end record when it finds no next item; reading it a second
    time proves it did not conclude after the first look.
    """

    def __init__(self, inner: Mailbox, key: str) -> None:
        super().__init__(inner)
        self.key = key
        self.misses = 0
        self.looked_twice = threading.Event()

    def get(self, key: str) -> bytes:
        try:
            return bytes(self.inner.get(key))
        except KeyNotFoundError:
            if key == self.key:
                self.misses += 1
                if self.misses >= 2:
                    self.looked_twice.set()
            raise


class Drain(threading.Thread):
    """Iterates ``consumer`` to the end in a thread; ``ended`` is set when it stops."""

    def __init__(self, consumer: Any) -> None:
        super().__init__(name="test-drain", daemon=True)
        self.consumer = consumer
        self.got: list[Any] = []
        self.error: BaseException | None = None
        self.ended = threading.Event()

    def run(self) -> None:
        try:
            with self.consumer as items:
                self.got.extend(items)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc
        finally:
            self.ended.set()


def _first(*events: threading.Event) -> None:
    """Wait until one of ``events`` is set (bounded polling: each is set by another thread)."""
    deadline = time.monotonic() + JOIN
    pause = threading.Event()  # never set: wait() is the polling period
    while not any(e.is_set() for e in events):
        assert time.monotonic() < deadline, "neither event happened"
        pause.wait(0.005)


def _mailbox_consumer_waits(rig: Rig, early: list[str]) -> None:
    """Producers ``early`` register and finish; the consumer must wait for ``late``."""
    box = rig.fresh()
    names = [*early, "late"]
    pipe = Pipeline.over_mailbox(box, names, stall_timeout=30, **FAST)
    for name in early:
        with pipe.producer(name) as producer:
            producer.put(payload(name, 0))
    watched = WatchEnd(box, end_key("late"))
    drain = Drain(
        Pipeline.over_mailbox(watched, names, stall_timeout=30, **FAST).consumer("c")  # type: ignore[arg-type]
    )
    drain.start()
    _first(watched.looked_twice, drain.ended)
    assert not drain.ended.is_set(), (
        f"the consumer ended ({drain.got}, {drain.error!r}) before producer 'late' registered"
    )
    with pipe.producer("late") as late:
        late.put(payload("late", 0))
    drain.join(JOIN)
    assert drain.error is None
    assert sorted(drain.got) == sorted(payload(name, 0) for name in names)


def test_a_mailbox_consumer_waits_for_a_declared_producer_that_registers_late(rig: Rig) -> None:
    _mailbox_consumer_waits(rig, early=["early"])


def test_a_mailbox_consumer_opened_before_any_producer_registered_waits(rig: Rig) -> None:
    _mailbox_consumer_waits(rig, early=[])


def _in_process_consumer_waits(early: list[str]) -> None:
    """Producers ``early`` register and finish; the consumer must wait for ``late``."""
    names = [*early, "late"]
    pipe = Pipeline.in_process(names, stall_timeout=30)
    for name in early:
        with pipe.producer(name) as producer:
            producer.put(f"{name}-0")
    drain = Drain(pipe.consumer("c"))
    drain.start()
    transport: Any = pipe._transport
    waiting = threading.Event()

    def watch() -> None:
        # The consumer is waiting once it has queued itself for the next hand-off.
        while not drain.ended.is_set():
            with transport.lock:
                if transport.waiters:
                    waiting.set()
                    return
            drain.ended.wait(0.005)

    watcher = threading.Thread(target=watch, name="test-watch", daemon=True)
    watcher.start()
    _first(waiting, drain.ended)
    assert not drain.ended.is_set(), (
        f"the consumer ended ({drain.got}, {drain.error!r}) before producer 'late' registered"
    )
    with pipe.producer("late") as late:
        late.put("late-0")
    drain.join(JOIN)
    assert drain.error is None
    assert drain.got == [f"{name}-0" for name in names]


def test_an_in_process_consumer_waits_for_a_declared_producer_that_registers_late() -> None:
    _in_process_consumer_waits(early=["early"])


def test_an_in_process_consumer_opened_before_any_producer_registered_waits() -> None:
    _in_process_consumer_waits(early=[])
