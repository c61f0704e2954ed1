"""Waiting in a test for a state that nothing notifies: polled, with a deadline."""

from __future__ import annotations

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
