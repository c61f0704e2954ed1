"""The Mailbox contract: what every backend promises.

A :class:`Mailbox` maps ``str`` keys to ``bytes`` in one namespace. Its essential promise is
:meth:`Mailbox.put_if_absent`: among any number of concurrent calls on one key, from threads,
processes or machines, exactly one returns ``True``, and afterwards every reader sees that
call's bytes. Backends only claim this where the store itself enforces it; none fakes it by
checking and then writing.

This module holds the contract only: the :class:`Mailbox` and
:class:`SupportsCompareAndSwap` protocols, :class:`Version` and :class:`Capability`. The
machinery every built-in backend shares (validation, retries, lost-response resolution) is
:class:`~gradientmail.backends.BaseMailbox`; how to write a backend of your own is in
``docs/extending.md``.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

__all__ = [
    "BytesLike",
    "Capability",
    "Mailbox",
    "SupportsCompareAndSwap",
    "SupportsListStartAfter",
    "Version",
]

#: What a value may be: ``bytes``, or a ``bytearray`` or ``memoryview`` (copied on write).
BytesLike = bytes | bytearray | memoryview


@dataclass(frozen=True)
class Version:
    """An opaque token naming one stored write of one key.

    Obtained from :meth:`Mailbox.get_versioned` and passed back to
    :meth:`Mailbox.put_if_match`. A version never matches different bytes. What else it
    promises depends on the backend:

    * memory://, file://, GCS and Azure: a version names one write (the write id, the object
      generation, Azure's ETag) and is never reused for a key, so a stale version can never
      match again.
    * S3: a version is the ETag, which names the bytes stored. Two writes of identical bytes
      may share a version, so after a key is rewritten with bytes it held before, an old
      version matches again (ABA). Write something unique to each write into the value (a
      token, a growing sequence number) where that matters; gradientmail's own claims,
      leases and records do.

    A backend declares the second kind with ``versions_name_bytes = True``
    (:class:`~gradientmail.backends.BaseMailbox`).
    """

    token: str

    def __str__(self) -> str:
        return self.token


class Capability(enum.Enum):
    """What a mailbox can promise. Ask with ``mailbox.supports(Capability.X)``."""

    #: ``put_if_absent`` is enforced by the store itself, so exactly one concurrent caller wins.
    ATOMIC_CREATE = "atomic-create"
    #: ``get_versioned`` / ``put_if_match`` are available and atomic.
    COMPARE_AND_SWAP = "compare-and-swap"
    #: Handles in other processes (or machines) opened on the same URL see the same keys.
    SHARED_ACROSS_PROCESSES = "shared-across-processes"
    #: ``list(prefix, start_after=key)`` starts in the store (S3 ``StartAfter``, GCS
    #: ``start_offset``, a sorted index): a partial listing costs requests in proportion to
    #: the keys it returns, not to the keys before ``start_after``. Every mailbox built on
    #: ``BaseMailbox`` accepts ``start_after``; without this capability it filters a full
    #: listing.
    LIST_START_AFTER = "list-start-after"


@runtime_checkable
class Mailbox(Protocol):
    """A key→bytes namespace with an atomic create-if-absent.

    Keys follow the key rules of ``docs/urls.md``; every method raises
    :class:`~gradientmail.InvalidKeyError` for a bad key before touching the store.
    Store failures raise :class:`~gradientmail.BackendError` subclasses.
    """

    @property
    def url(self) -> str:
        """The mailbox's URL, never with credentials."""
        ...

    @property
    def capabilities(self) -> frozenset[Capability]:
        """The capabilities this mailbox declares."""
        ...

    def supports(self, capability: Capability) -> bool:
        """Whether this mailbox declares ``capability``."""
        ...

    @property
    def max_key_bytes(self) -> int:
        """The longest key accepted, in UTF-8 bytes: 1024, less an object store's prefix."""
        ...

    def put_if_absent(self, key: str, data: BytesLike) -> bool:
        """Create ``key`` holding ``data`` only if ``key`` does not exist.

        Returns ``True`` exactly when this call's write is the one stored. Among concurrent
        calls on one key exactly one returns ``True``. After it returns, every ``get`` and
        ``list`` from any client sees the key with its bytes.

        ``False`` is definitive: it is returned only when the store refused the only request
        that may have reached it. When an earlier attempt may have landed (its response was
        lost) and the key now holds another writer's object, the call raises
        ``OutcomeUnknownError``: our write may have been stored and then overwritten by
        ``put``, or deleted and created again, and nothing stored tells that apart from a
        refusal.

        Raises:
            OutcomeUnknownError: the write may or may not have been stored and reading the
                key back could not tell. Never ``False`` for a write that may have landed.
        """
        ...

    def get(self, key: str) -> bytes:
        """Return the stored bytes. Raises ``KeyNotFoundError`` if the key does not exist."""
        ...

    def list(self, prefix: str = "") -> Iterator[str]:
        """Every key starting with ``prefix`` (a plain string prefix), in ascending order.

        Keys are streamed page by page; the listing is never gathered into one list first.
        """
        ...

    def put(self, key: str, data: BytesLike) -> None:
        """Write ``data`` to ``key`` unconditionally, replacing any previous value."""
        ...

    def delete(self, key: str) -> None:
        """Remove ``key``. Deleting a missing key is not an error."""
        ...

    def get_versioned(self, key: str) -> tuple[bytes, Version]:
        """Return the stored bytes and the version that wrote them (compare-and-swap).

        Raises:
            KeyNotFoundError: the key does not exist.
            NotSupportedError: the mailbox does not declare ``Capability.COMPARE_AND_SWAP``.
        """
        ...

    def put_if_match(self, key: str, data: BytesLike, version: Version) -> Version | None:
        """Replace ``key`` only if its current version is ``version``.

        Returns the new version, or ``None`` (changing nothing) if the key is missing or its
        version is not ``version``.

        Raises:
            NotSupportedError: the mailbox does not declare ``Capability.COMPARE_AND_SWAP``.
            OutcomeUnknownError: the write may have landed and reading back could not tell.
        """
        ...


@runtime_checkable
class SupportsCompareAndSwap(Protocol):
    """The compare-and-swap capability on its own, for code that needs only that."""

    def get_versioned(self, key: str) -> tuple[bytes, Version]: ...

    def put_if_match(self, key: str, data: BytesLike, version: Version) -> Version | None: ...


@runtime_checkable
class SupportsListStartAfter(Protocol):
    """Partial listings (``Capability.LIST_START_AFTER``), for code that resumes a listing."""

    def list(self, prefix: str = "", *, start_after: str | None = None) -> Iterator[str]:
        """The keys of ``list(prefix)`` that sort strictly after ``start_after``, ascending.

        ``start_after`` is a whole key (prefix included); it need not exist. ``None`` lists
        everything under ``prefix``.
        """
        ...
