"""``Patient``: what it retries, for how long, and that a listing resumes where it failed."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from gradientmail import KeyNotFoundError, Mailbox, OutcomeUnknownError, TransientBackendError
from gradientmail.patterns._patience import Patient


class Flaky:
    """Forwards to a mailbox; raises the queued errors first, one a call."""

    def __init__(self, inner: Mailbox) -> None:
        self.inner = inner
        self.errors: list[BaseException] = []
        self.calls = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def get(self, key: str) -> bytes:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return self.inner.get(key)

    def list(self, prefix: str = "", *, start_after: str | None = None) -> Iterator[str]:
        for key in self.inner.list(prefix, start_after=start_after):  # type: ignore[call-arg]
            if key.endswith("2") and self.errors:
                raise self.errors.pop(0)
            yield key


def _transient() -> TransientBackendError:
    return TransientBackendError("injected", key="k")


@pytest.fixture
def flaky(rig_memory: Any) -> Flaky:
    memory_box = rig_memory.fresh()
    for n in range(5):
        memory_box.put(f"p/{n}", b"x")
    return Flaky(memory_box)


def test_a_listing_that_fails_part_way_resumes_after_the_last_key(flaky: Flaky) -> None:
    flaky.errors = [_transient(), _transient()]
    patient = Patient(flaky, 10, threading.Event(), "test")  # type: ignore[arg-type]
    assert list(patient.list("p/")) == [f"p/{n}" for n in range(5)]
    assert flaky.errors == []


def test_a_transient_failure_is_retried_and_an_answer_is_not(flaky: Flaky) -> None:
    patient = Patient(flaky, 10, threading.Event(), "test")  # type: ignore[arg-type]
    flaky.errors = [_transient(), _transient()]
    assert patient.get("p/1") == b"x"
    assert flaky.calls == 3
    for answer in (KeyNotFoundError("gone"), OutcomeUnknownError("maybe", key="p/1")):
        flaky.errors = [answer]
        with pytest.raises(type(answer)):
            patient.get("p/1")


def test_it_gives_up_after_its_patience_and_at_once_when_stopped(flaky: Flaky) -> None:
    stop = threading.Event()
    patient = Patient(flaky, 0.3, stop, "test")  # type: ignore[arg-type]
    flaky.errors = [_transient() for _ in range(100)]
    with pytest.raises(TransientBackendError, match="injected"):
        patient.get("p/1")
    assert 3 <= flaky.calls < 10, flaky.calls  # tried again, on a backoff, then gave up
    stop.set()
    flaky.calls = 0
    with pytest.raises(TransientBackendError):
        patient.get("p/1")
    assert flaky.calls == 1
