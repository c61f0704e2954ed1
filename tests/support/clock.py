"""A clock a test moves by hand, for leases and their observers: no test waits for time."""

from __future__ import annotations

import threading


class FakeClock:
    """Monotonic seconds that change only when the test calls :meth:`advance`."""

    def __init__(self, start: float = 1000.0) -> None:
        self._now = start
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds
