"""Reading the current version of a shared model: the head, then its fragments.

The one door by which a learner (joining or exchanging) and ``load_shared`` read a
version. A fragment can be missing for two reasons:

* **collected**: a slow reader's version fell out of the ``keep`` kept while it read. The
  head has moved on by then, so reading it again finds a newer version at once.
* **damage**: something deleted a fragment, or wrote a head that names one that never
  existed. The head then stays where it is. The reader pauses (from 0.1 s, doubling up to
  2 s) while it does, and once the head has named the same unreadable version for
  :data:`UNREADABLE_AFTER_S` seconds it raises ``InvalidDataError`` naming the missing
  keys, instead of reading for ever.

The state of the version last read is cached by its token, so a learner whose version is
still current reads no fragment.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from gradientmail._errors import InvalidDataError
from gradientmail._exchange.layout import Head, start_over
from gradientmail._exchange.store import SharedStore, Superseded
from gradientmail._exchange.tensors import State
from gradientmail.mailbox import Version

__all__ = ["UNREADABLE_AFTER_S", "VersionReader"]

#: Seconds a head may name a version that cannot be read before readers give up on it.
UNREADABLE_AFTER_S = 10.0
FIRST_PAUSE_S = 0.1
MAX_PAUSE_S = 2.0


class VersionReader:
    """Reads a shared model's current version through ``store``.

    Args:
        store: the shared model's store.
        versioned: read the head with its version, for a swap (else a plain read, which
            works on a store without compare-and-swap).
        pause: waits between reads of an unreadable version (``time.sleep``).
        clock: monotonic seconds, for the bound.
        stop: once set (the learner is leaving), an unreadable version is given up on at
            once, and pauses end early.
    """

    def __init__(
        self,
        store: SharedStore,
        *,
        versioned: bool = True,
        pause: Callable[[float], object] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        stop: threading.Event | None = None,
    ) -> None:
        self.store = store
        self._versioned = versioned
        self._pause = pause
        self._clock = clock
        self._stop = stop
        if stop is not None and pause is time.sleep:
            self._pause = stop.wait
        self._cached: tuple[str, State] | None = None
        #: The unreadable token the head stays on, since when, and the next pause.
        self._stuck: tuple[str, float, float] | None = None

    def current(self) -> tuple[Head, Version | None, State] | None:
        """The head, its version (``None`` for a plain read) and its state; ``None`` when no
        head exists.

        Raises:
            InvalidDataError: the head named a version that cannot be read for
                :data:`UNREADABLE_AFTER_S` seconds (the missing keys named), or a damaged
                record (see :meth:`SharedStore.read_state`).
        """
        while True:
            if self._versioned:
                got = self.store.read_head()
                if got is None:
                    return None
                head, version = got
            else:
                plain = self.store.read_head_plain()
                if plain is None:
                    return None
                head, version = plain, None
            try:
                state = self.state_of(head)
            except Superseded:
                self._unreadable(head)
                continue
            self._stuck = None
            return head, version, state

    def state_of(self, head: Head) -> State:
        """``head``'s state, from the cache when it names the version last read.

        Raises:
            Superseded: a fragment is missing.
        """
        if self._cached is not None and self._cached[0] == head.token:
            return self._cached[1]
        state = self.store.read_state(head)
        self._cached = (head.token, state)
        return state

    def remember(self, head: Head, state: State) -> None:
        """Cache ``state`` as ``head``'s (a version this learner wrote or adopted)."""
        self._cached = (head.token, state)

    def _unreadable(self, head: Head) -> None:
        """A fragment of ``head``'s version is missing: read again at once the first time
        (the head may have moved on), then pause, and give up after the bound."""
        now = self._clock()
        stuck = self._stuck
        if stuck is None or stuck[0] != head.token:
            self._stuck = (head.token, now, FIRST_PAUSE_S)
            return
        token, since, pause = stuck
        stopping = self._stop is not None and self._stop.is_set()
        if now - since >= UNREADABLE_AFTER_S or stopping:
            missing = self.store.missing_fragments(head) or [f"a fragment of {token}"]
            keys = self.store.keys
            raise InvalidDataError(
                f"{keys.head} has named version {head.version} for {now - since:.0f} s, but "
                f"its data is missing: {', '.join(missing)}. A lifecycle rule, a cleanup or "
                f"a partial restore deleted it, or another program wrote the head. "
                f"{start_over(keys.head)}"
            )
        self._pause(min(pause, UNREADABLE_AFTER_S - (now - since)))
        self._stuck = (token, since, min(MAX_PAUSE_S, 2 * pause))
