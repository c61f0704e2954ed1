"""A mailbox whose conditional writes are ambiguous once each: ``OutcomeUnknownError``
after storing the write (a lost response) or instead of it (a lost request)."""

from __future__ import annotations

from typing import Any

from gradientmail import Mailbox
from gradientmail._errors import OutcomeUnknownError
from tests.support.delegating import Delegating


class Ambiguous(Delegating):
    """Raises OutcomeUnknownError on the first create, and on the first swap, of each key under
    ``prefixes``: after storing it (a lost response) or instead of it (a lost request)."""

    def __init__(self, inner: Mailbox, prefixes: tuple[str, ...], *, stored: bool) -> None:
        super().__init__(inner)
        self.prefixes = prefixes
        self.stored = stored
        self.hit: list[str] = []
        self.kinds: set[tuple[str, str]] = set()

    def _first(self, key: str, kind: str) -> bool:
        if key.startswith(self.prefixes) and (kind, key) not in self.kinds:
            self.kinds.add((kind, key))
            self.hit.append(key)
            return True
        return False

    def put_if_absent(self, key: str, data: Any) -> bool:
        if self._first(key, "create"):
            if self.stored:
                self.inner.put_if_absent(key, data)
            raise OutcomeUnknownError("response lost (test)", key=key)
        return bool(self.inner.put_if_absent(key, data))

    def put_if_match(self, key: str, data: Any, version: Any) -> Any:
        if self._first(key, "swap"):
            if self.stored:
                self.inner.put_if_match(key, data, version)
            raise OutcomeUnknownError("response lost (test)", key=key)
        return self.inner.put_if_match(key, data, version)
