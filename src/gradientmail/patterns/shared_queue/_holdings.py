"""The units one learner holds: the only state that its loader and consumer sides share.

The loader adds a unit before buffering its first item; the recorder removes it once its
completion is recorded; leaving early takes every unit still held to release it. Each
change wakes whoever waits on the holdings: a loader bounding how far it runs ahead of
the recorder, or waiting for its own units to be recorded before it marks itself idle.
"""

from __future__ import annotations

import threading

from gradientmail.patterns.shared_queue._unit_claims import Held

__all__ = ["Holdings"]


class Holdings:
    """Units held by this learner, by identifier, behind one lock.

    Guarantees: every method is atomic with respect to the others; :meth:`close` wakes
    every waiter at once, and waits return ``False`` from then on.
    """

    def __init__(self) -> None:
        self._held: dict[str, Held] = {}
        self._changed = threading.Condition()
        self._closed = False

    def add(self, held: Held) -> None:
        with self._changed:
            self._held[held.identifier] = held

    def remove(self, identifier: str) -> None:
        """Forget a unit whose completion is recorded; wake the waiters."""
        with self._changed:
            self._held.pop(identifier, None)
            self._changed.notify_all()

    def identifiers(self) -> set[str]:
        with self._changed:
            return set(self._held)

    def take_all(self) -> list[Held]:
        """Every unit still held, forgotten here (to be released)."""
        with self._changed:
            held = list(self._held.values())
            self._held.clear()
            return held

    def close(self) -> None:
        """Wake every waiter; waits return ``False`` from now on."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def wait_at_most(self, limit: int) -> bool:
        """Wait until at most ``limit`` units are held; ``False`` if closed first."""
        with self._changed:
            while len(self._held) > limit and not self._closed:
                self._changed.wait()  # notified by each recorded completion and by close
            return not self._closed
