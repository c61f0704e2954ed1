"""Waiting in a test for a state that nothing notifies: polled, with a deadline."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


def wait_until(
    condition: Callable[[], object], timeout: float, what: str, every: float = 0.02
) -> None:
    """Poll ``condition`` every ``every`` seconds until it holds; fail naming ``what`` after
    ``timeout`` seconds. A bound on a wait, never the synchronisation itself."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(every)


def returns_within(body: Callable[[], object], timeout: float, what: str) -> None:
    """Run ``body`` in a thread; fail if it has not returned after ``timeout`` seconds (a
    call that must not hang, or wait for the store), and re-raise what it raised."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            body()
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout=timeout)
    assert not thread.is_alive(), f"{what} did not return within {timeout} s"
    if errors:
        raise errors[0]
