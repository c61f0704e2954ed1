"""A mailbox wrapper that fails every call while an outage lasts, for the patience tests."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

from gradientmail import Mailbox, TransientBackendError

#: Failed calls after which :attr:`Outage.failed` is set.
FAILURES = 3


class Outage:
    """Forwards to a mailbox; while :attr:`down` is set, every call fails as transient
    (every call on a key starting with ``only``, when given).

    :attr:`failed` is set once :data:`FAILURES` calls failed during this outage.
    """

    def __init__(self, inner: Mailbox, only: str | None = None) -> None:
        self.inner = inner
        self.only = only
        self.down = threading.Event()
        self.failed = threading.Event()
        self.failures = Counter[str]()
        self._lock = threading.Lock()

    def down_until_failed(self) -> threading.Thread:
        """Go down now, and back up (from a thread, returned) once calls failed."""
        self.down.set()

        def end() -> None:
            self.failed.wait(30)
            self.down.clear()

        ender = threading.Thread(target=end)
        ender.start()
        return ender

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self.inner, name)
        if not callable(attribute) or name in {"supports"}:
            return attribute

        def call(*args: Any, **kwargs: Any) -> Any:
            key = args[0] if args and isinstance(args[0], str) else ""
            if self.only is None or key.startswith(self.only):
                self._fail_if_down(name)
            return attribute(*args, **kwargs)

        return call

    def list(self, prefix: str = "", *, start_after: str | None = None) -> Iterator[str]:
        """Fails part-way too: after the first key, while down."""
        if self.only is not None and not prefix.startswith(self.only):
            yield from self.inner.list(prefix, start_after=start_after)  # type: ignore[call-arg]
            return
        self._fail_if_down("list")
        for n, key in enumerate(self.inner.list(prefix, start_after=start_after)):  # type: ignore[call-arg]
            if n:
                self._fail_if_down("list")
            yield key

    def _fail_if_down(self, name: str) -> None:
        if not self.down.is_set():
            return
        with self._lock:
            self.failures[name] += 1
            if self.failures.total() >= FAILURES:
                self.failed.set()
        raise TransientBackendError(f"injected outage ({name})", key="k")
