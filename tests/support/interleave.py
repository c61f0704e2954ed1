"""A mailbox that runs a callback between two chosen requests, to build one interleaving.

Races that a test would otherwise wait for by luck (an owner renews between an observer's
read and its declaration; a process dies between the two writes of a completion) are
built on purpose with :class:`Interleave`: it forwards every call to a real mailbox and,
right after the ``nth`` request that matches ``operation`` and ``key``, runs ``between``
once, before the caller sees the response. ``between`` may act on the store through
another handle, or raise to stand for a process that dies there.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from gradientmail import Mailbox
from tests.support.delegating import Delegating

#: The requests an interleaving can follow.
OPERATIONS = frozenset(
    {"get", "get_versioned", "put", "put_if_absent", "put_if_match", "delete", "list"}
)


class Interleave(Delegating):
    """Runs ``between()`` once, after the ``nth`` ``operation`` on ``key`` (a key, or a
    predicate on keys) has reached the store."""

    def __init__(
        self,
        inner: Mailbox,
        operation: str,
        key: str | Callable[[str], bool],
        between: Callable[[], object],
        *,
        nth: int = 1,
    ) -> None:
        super().__init__(inner)
        if operation not in OPERATIONS:
            raise ValueError(f"not an operation an interleaving can follow: {operation!r}")
        self.operation = operation
        self.matches = key if callable(key) else (lambda k: k == key)
        self.between = between
        self.nth = nth
        self.seen = 0
        self.ran = threading.Event()
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self.inner, name)
        if name != self.operation:
            return attribute

        def call(key: str, *args: Any, **kwargs: Any) -> Any:
            result = attribute(key, *args, **kwargs)
            with self._lock:
                due = self.matches(key) and not self.ran.is_set()
                if due:
                    self.seen += 1
                    due = self.seen == self.nth
                    if due:
                        self.ran.set()
            if due:
                self.between()
            return result

        return call
