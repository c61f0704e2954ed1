"""Deliberately broken stores, to prove that the conformance suite has teeth.

Never use these for real work. They exist so that the suite's own tests (and anyone
evaluating the suite) can watch it catch the two classic ways a store fakes atomicity:

* :class:`CheckThenWriteMailbox` (``check-then-write://``) implements ``put_if_absent``
  and compare-and-swap by *checking, then writing*: it looks the key up, and if the check
  passes it writes after a short window (default 1 ms, the order of a network round trip
  between a HEAD and a PUT). Racers that all check inside the window all win. Every single
  call on its own behaves perfectly, so only real concurrency exposes it. With the
  ``fraction`` option it does so only on that fraction of keys, chosen by a hash of the
  key, and uses the real exclusive create on all the rest: a store that goes wrong on a
  rare path, which shows whether a PASS's stated bound is real.
* :class:`IgnorePreconditionsMailbox` (``ignore-preconditions://``) declares atomic create
  but ignores the precondition entirely: ``put_if_absent`` always writes and returns
  ``True``, like a store that silently drops ``If-None-Match: *``.

URLs (the scheme is registered in the ``gradientmail.backends`` entry-point group):

``check-then-write://NAME``
    over the in-memory store ``NAME`` (:mod:`gradientmail.backends.memory`): threads of one
    process race on it; other processes do not see it.
``check-then-write:///abs/dir``
    over the directory ``/abs/dir`` (:mod:`gradientmail.backends.local`): threads *and*
    processes race on it, so the suite's process races run too.

The same two forms work for ``ignore-preconditions://``. Options, ``check-then-write``
only: ``window`` (seconds between the check and the write, default ``0.001``) and
``fraction`` (the share of keys that check and then write, default ``1``; e.g.
``check-then-write:///tmp/box?fraction=0.002`` is non-atomic on one key in 500).

One more breaks a listing rather than atomicity, and has no URL scheme: it is opened in
Python, ``IgnoreStartAfterMailbox(NAME)`` over the in-memory store ``NAME``.

* :class:`IgnoreStartAfterMailbox` declares ``Capability.LIST_START_AFTER`` but ignores
  ``start_after``: ``list(prefix, start_after=k)`` lists every key under ``prefix``, as a
  store that drops an unknown start parameter does. The ``list-start-after`` property
  must FAIL it. (Pickled, it reopens as a plain, correct ``memory://`` mailbox.)
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from typing import Any, ClassVar

from gradientmail._errors import ConfigurationError
from gradientmail.backends._base import BaseMailbox, Conflict, Stat
from gradientmail.backends._options import parse_options, split_url
from gradientmail.backends.local import FileMailbox
from gradientmail.backends.memory import MemoryMailbox
from gradientmail.mailbox import Capability, Version

__all__ = [
    "CheckThenWriteMailbox",
    "IgnorePreconditionsMailbox",
    "IgnoreStartAfterMailbox",
    "in_fraction",
]


def _window(value: object) -> float:
    seconds = float(value)  # type: ignore[arg-type]
    if not 0.0 <= seconds <= 1.0:
        raise ValueError(f"window must be between 0 and 1 second, got {seconds}")
    return seconds


def _fraction(value: object) -> float:
    share = float(value)  # type: ignore[arg-type]  # a number or its text; float() checks it
    if not 0.0 < share <= 1.0:
        raise ValueError(f"fraction must be above 0 and at most 1, got {share}")
    return share


def in_fraction(key: str, fraction: float) -> bool:
    """Whether ``key`` falls in the ``fraction`` of keys picked by its SHA-256 hash.

    The pick depends on the key alone, so every racer and process agrees on it, and keys
    under a fresh prefix are a fresh, independent sample.
    """
    if fraction >= 1.0:
        return True
    digest = hashlib.sha256(key.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") < fraction * 2**64


class _FakeMailbox(BaseMailbox):
    """Delegates storage to a real memory or file mailbox; subclasses break one primitive."""

    scheme: ClassVar[str] = ""
    accepted_options: ClassVar[dict[str, Any]] = {}

    def __init__(self, url: str, inner: BaseMailbox, options: dict[str, Any]) -> None:
        super().__init__(url, options)
        self._inner = inner
        capabilities = {Capability.ATOMIC_CREATE, Capability.COMPARE_AND_SWAP}
        if isinstance(inner, FileMailbox):
            capabilities.add(Capability.SHARED_ACROSS_PROCESSES)
        if inner.supports(Capability.LIST_START_AFTER):
            capabilities.add(Capability.LIST_START_AFTER)  # true: listings are the store's
        # The lie is the point: these stores declare what they do not deliver.
        self.capabilities = frozenset(capabilities)  # type: ignore[misc]

    @classmethod
    def open(cls, url: str, **options: Any) -> _FakeMailbox:
        """Open ``SCHEME://NAME`` (in memory) or ``SCHEME:///abs/dir`` (a directory).

        Raises:
            ConfigurationError: an unknown option or a URL naming neither.
        """
        parsed = parse_options(cls.scheme, options, cls.accepted_options)
        split = split_url(url)
        inner: BaseMailbox
        if split.netloc:
            inner = MemoryMailbox.open("memory://" + split.netloc + split.path)
        elif split.path.startswith("/"):
            inner = FileMailbox.open("file://" + split.path, fsync=False)
        else:
            raise ConfigurationError(
                f"{url!r} names no store; use {cls.scheme}://NAME (in memory) or "
                f"{cls.scheme}:///abs/dir (a directory shared by processes)"
            )
        return cls(url, inner, parsed)

    def close(self) -> None:
        """Close the store underneath."""
        self._inner.close()

    # Everything but the broken primitive goes straight to the real store.
    def _read(self, key: str) -> tuple[bytes, Version]:
        return self._inner._read(key)

    def _stat(self, key: str) -> Stat | None:
        return self._inner._stat(key)

    def _write(self, key: str, data: bytes, write_id: str) -> None:
        self._inner._write(key, data, write_id)

    def _delete(self, key: str) -> None:
        self._inner._delete(key)

    def _iter_keys(self, prefix: str) -> Iterator[str]:
        return self._inner._iter_keys(prefix)

    def _iter_keys_after(self, prefix: str, start_after: str) -> Iterator[str]:
        return self._inner._iter_keys_after(prefix, start_after)

    def _replace(
        self, key: str, data: bytes, version: Version, write_id: str
    ) -> Version | Conflict:
        return self._inner._replace(key, data, version, write_id)

    def _create(self, key: str, data: bytes, write_id: str) -> Version | Conflict:
        return self._inner._create(key, data, write_id)


class CheckThenWriteMailbox(_FakeMailbox):
    """NOT ATOMIC: ``put_if_absent`` and ``put_if_match`` check, wait ``window``, then write.

    Each call alone is correct; concurrent calls inside the window all succeed. Only keys
    in :attr:`fraction` (all, by default) are treated so; the rest are truly atomic.
    """

    scheme = "check-then-write"
    accepted_options: ClassVar[dict[str, Any]] = {"window": _window, "fraction": _fraction}

    @property
    def window(self) -> float:
        """Seconds between the check and the write."""
        return float(self._options.get("window", 0.001))

    @property
    def fraction(self) -> float:
        """The share of keys, picked by hash (:func:`in_fraction`), that check then write."""
        return float(self._options.get("fraction", 1.0))

    def _create(self, key: str, data: bytes, write_id: str) -> Version | Conflict:
        if not in_fraction(key, self.fraction):
            return self._inner._create(key, data, write_id)
        if self._inner._stat(key) is not None:
            return Conflict.LOST
        time.sleep(self.window)  # the gap between a HEAD and a PUT; not synchronisation
        self._inner._write(key, data, write_id)
        return Version(write_id)

    def _replace(
        self, key: str, data: bytes, version: Version, write_id: str
    ) -> Version | Conflict:
        if not in_fraction(key, self.fraction):
            return self._inner._replace(key, data, version, write_id)
        current = self._inner._stat(key)
        if current is None or current.version != version:
            return Conflict.LOST
        time.sleep(self.window)
        self._inner._write(key, data, write_id)
        return Version(write_id)


class IgnorePreconditionsMailbox(_FakeMailbox):
    """NOT ATOMIC: declares atomic create, but ``put_if_absent`` always writes and wins."""

    scheme = "ignore-preconditions"

    def _create(self, key: str, data: bytes, write_id: str) -> Version | Conflict:
        self._inner._write(key, data, write_id)
        return Version(write_id)


class IgnoreStartAfterMailbox(MemoryMailbox):
    """WRONG LISTINGS: declares ``Capability.LIST_START_AFTER``, but ignores ``start_after``.

    ``list(prefix, start_after=k)`` returns every key under ``prefix``, those up to ``k``
    included. Everything else is the real ``memory://`` store ``name``.
    """

    capabilities: ClassVar[frozenset[Capability]] = frozenset(
        {Capability.ATOMIC_CREATE, Capability.COMPARE_AND_SWAP, Capability.LIST_START_AFTER}
    )

    def _iter_keys_after(self, prefix: str, start_after: str) -> Iterator[str]:
        return self._iter_keys(prefix)  # the lie: the start point is dropped
