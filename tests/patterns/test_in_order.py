"""The one background recorder: one write at a time, in hand-over order, none lost."""

from __future__ import annotations

import threading

import pytest

from gradientmail.patterns._in_order import InOrderRecorder


def test_every_entry_is_written_once_in_hand_over_order_by_flush_time() -> None:
    written: list[int] = []
    recorder: InOrderRecorder[int] = InOrderRecorder("test-in-order", written.append).start()
    for n in range(200):
        recorder.hand_over(n)
    recorder.flush()
    assert written == list(range(200))
    assert recorder.pending == 0
    recorder.stop()


def test_an_entry_stays_pending_until_its_write_returns() -> None:
    """flush() returns only after the write in flight has returned, never while it runs."""
    entered, release = threading.Event(), threading.Event()
    log: list[str] = []

    def write(entry: str) -> None:
        entered.set()
        release.wait()
        log.append(f"written {entry}")

    recorder: InOrderRecorder[str] = InOrderRecorder("test-in-order", write).start()
    recorder.hand_over("a")
    assert entered.wait(30)
    assert recorder.pending == 1  # in flight still counts

    def flush() -> None:
        recorder.flush()
        log.append("flushed")

    flusher = threading.Thread(target=flush)
    flusher.start()
    flusher.join(0.5)  # gives a flush that does not wait the chance to return early
    release.set()
    flusher.join(30)
    assert log == ["written a", "flushed"]
    recorder.stop()


def test_stop_writes_what_is_pending_then_ends_the_thread() -> None:
    release = threading.Event()
    written: list[int] = []

    def write(entry: int) -> None:
        release.wait()
        written.append(entry)

    recorder: InOrderRecorder[int] = InOrderRecorder("test-in-order", write).start()
    for n in range(5):
        recorder.hand_over(n)
    stopper = threading.Thread(target=recorder.stop)
    stopper.start()
    release.set()
    stopper.join(30)
    assert not stopper.is_alive()
    assert written == [0, 1, 2, 3, 4]


def test_a_write_that_raises_ends_the_thread_and_flush_does_not_hang(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(threading, "excepthook", lambda args: None)  # the thread's death

    def write(entry: int) -> None:
        raise RuntimeError(f"write {entry} failed")

    recorder: InOrderRecorder[int] = InOrderRecorder("test-in-order", write).start()
    recorder.hand_over(1)
    recorder.hand_over(2)
    recorder.flush()  # the thread ended: flush returns instead of waiting forever
    assert recorder.pending == 1  # the entry after the failure was never written
    recorder.stop()
