"""``memory://NAME``: an in-process mailbox, for tests, demos and threads of one process.

Accepts no options. Every handle opened on the same NAME in one process shares one store,
so two handles compete for real. A handle pickled to another process reopens the store of
that NAME *in that process*, which starts empty: memory mailboxes do not declare
``Capability.SHARED_ACROSS_PROCESSES``.

Guarantees: all operations are atomic under one lock per store; ``put_if_absent`` and
compare-and-swap are linearizable across threads. ``list`` streams pages of
:data:`PAGE_SIZE` keys from a sorted index, so concurrent writers are not blocked for the
length of a listing; a key created or deleted during a listing may or may not appear.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar
from urllib.parse import quote, urlsplit

from gradientmail._errors import ConfigurationError, KeyNotFoundError
from gradientmail.backends._base import BaseMailbox, Conflict, Stat
from gradientmail.backends._options import parse_options, split_url
from gradientmail.mailbox import Capability, Version

__all__ = ["PAGE_SIZE", "MemoryMailbox"]

PAGE_SIZE = 1000


@dataclass
class _Store:
    lock: threading.Lock = field(default_factory=threading.Lock)
    values: dict[str, tuple[bytes, str]] = field(default_factory=dict)  # key → (data, write id)
    sorted_keys: list[str] = field(default_factory=list)


_STORES: dict[str, _Store] = {}
_STORES_LOCK = threading.Lock()


def _store(name: str) -> _Store:
    with _STORES_LOCK:
        return _STORES.setdefault(name, _Store())


class MemoryMailbox(BaseMailbox):
    """A mailbox in this process's memory, shared by every handle of the same name."""

    capabilities: ClassVar[frozenset[Capability]] = frozenset(
        {Capability.ATOMIC_CREATE, Capability.COMPARE_AND_SWAP, Capability.LIST_START_AFTER}
    )

    def __init__(self, name: str) -> None:
        # The URL carries the name percent-encoded, so that it reopens the same store when
        # parsed again (a pickle, a URL printed and pasted): split_url decodes exactly once.
        super().__init__("memory://" + quote(name, safe="/", errors="surrogateescape"))
        self.name = name
        self._store = _store(name)

    @classmethod
    def open(cls, url: str, **options: Any) -> MemoryMailbox:
        """Open ``memory://NAME``. Raises ``ConfigurationError`` for options or a bad URL."""
        parse_options("memory", options, {})
        split = split_url(url)
        if "@" in urlsplit(url).netloc:
            raise ConfigurationError(
                "memory:// URLs take no user name or password; use memory://NAME"
            )
        name = (split.netloc + split.path).strip("/")
        if not name:
            raise ConfigurationError(
                f"{url!r} has no store name; use memory://NAME, e.g. memory://run1"
            )
        return cls(name)

    def _create(self, key: str, data: bytes, write_id: str) -> Version | Conflict:
        store = self._store
        with store.lock:
            if key in store.values:
                return Conflict.LOST
            store.values[key] = (data, write_id)
            bisect.insort(store.sorted_keys, key)
        return Version(write_id)

    def _read(self, key: str) -> tuple[bytes, Version]:
        with self._store.lock:
            entry = self._store.values.get(key)
        if entry is None:
            raise KeyNotFoundError(key, self.url)
        return entry[0], Version(entry[1])

    def _stat(self, key: str) -> Stat | None:
        with self._store.lock:
            entry = self._store.values.get(key)
        return None if entry is None else Stat(Version(entry[1]), entry[1])

    def _write(self, key: str, data: bytes, write_id: str) -> None:
        store = self._store
        with store.lock:
            if key not in store.values:
                bisect.insort(store.sorted_keys, key)
            store.values[key] = (data, write_id)

    def _delete(self, key: str) -> None:
        store = self._store
        with store.lock:
            if store.values.pop(key, None) is not None:
                index = bisect.bisect_left(store.sorted_keys, key)
                del store.sorted_keys[index]

    def _replace(
        self, key: str, data: bytes, version: Version, write_id: str
    ) -> Version | Conflict:
        store = self._store
        with store.lock:
            entry = store.values.get(key)
            if entry is None or entry[1] != version.token:
                return Conflict.LOST
            store.values[key] = (data, write_id)
        return Version(write_id)

    def _iter_keys(self, prefix: str) -> Iterator[str]:
        return self._pages(prefix, None)

    def _iter_keys_after(self, prefix: str, start_after: str) -> Iterator[str]:
        return self._pages(prefix, start_after)

    def _pages(self, prefix: str, after: str | None) -> Iterator[str]:
        """Keys under ``prefix`` after ``after`` (all if ``None``), one page per lock hold."""
        store = self._store
        while True:
            with store.lock:
                keys = store.sorted_keys
                start = bisect.bisect_left(keys, prefix)
                if after is not None:
                    start = max(start, bisect.bisect_right(keys, after))
                page = keys[start : start + PAGE_SIZE]
            for key in page:
                if not key.startswith(prefix):
                    return
                yield key
            if len(page) < PAGE_SIZE:
                return
            after = page[-1]
