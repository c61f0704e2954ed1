"""``BaseMailbox``: the machinery every built-in backend shares, written once.

Backends subclass :class:`BaseMailbox`, declare ``capabilities``, implement the ``open``
classmethod (the factory ``from_url`` calls) and a handful of primitives (``_create``,
``_read``, ``_stat``, ``_write``, ``_delete``, ``_iter_keys`` and optionally ``_replace``
and ``_iter_keys_after``).
``BaseMailbox`` supplies:

* key and value validation (:mod:`gradientmail._keys`);
* the retry policy for transient failures (:class:`RetryPolicy`);
* lost-response resolution: every conditional write carries a unique write id, and when a
  precondition failure follows a retry or a transport error, the key is read back to decide
  whether our own write is the one stored. If that cannot be decided,
  :class:`~gradientmail._errors.OutcomeUnknownError` is raised; ``False``/``None`` is never
  returned for a write that may have landed.

``docs/extending.md`` walks through a complete backend (``backends/memory.py``).
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from typing import Any, ClassVar

from gradientmail._errors import (
    BackendError,
    ConfigurationError,
    InvalidDataError,
    InvalidKeyError,
    NotSupportedError,
    OutcomeUnknownError,
    TransientBackendError,
)
from gradientmail._keys import MAX_KEY_BYTES, validate_key, validate_prefix
from gradientmail.backends._options import redact
from gradientmail.backends._primitives import Conflict, RetryPolicy, Stat, as_bytes, new_write_id
from gradientmail.mailbox import BytesLike, Capability, Mailbox, Version

__all__ = [
    "BaseMailbox",
    "Conflict",
    "RetryPolicy",
    "Stat",
    "as_bytes",
    "new_write_id",
]

#: Retries and store errors, at DEBUG; URLs only through ``redact``.
_log = logging.getLogger(__name__)


def _restore(url: str, options: Mapping[str, Any]) -> Mailbox:
    from gradientmail._urls import from_url

    return from_url(url, **options)


class BaseMailbox(ABC):
    """Base class for backends: validation, retries and lost-response handling in one place.

    Subclasses set ``capabilities`` and implement the primitives below. Primitives receive
    keys that are already validated, raise ``KeyNotFoundError`` for missing keys where
    documented, and map every store failure to a ``BackendError`` subclass (transient
    failures as ``TransientBackendError``).
    """

    capabilities: ClassVar[frozenset[Capability]] = frozenset()
    retry_policy: ClassVar[RetryPolicy] = RetryPolicy()
    #: What a :class:`Version` names. ``False`` (the default): one write; versions never
    #: repeat for a key, so a stale version never matches again. ``True``: the bytes stored
    #: (S3's ETag): two writes of identical bytes may share a version, so after a key is
    #: rewritten with bytes it held before, an old version matches again (ABA). Either way
    #: a version never matches different bytes.
    versions_name_bytes: ClassVar[bool] = False
    #: Object stores: what precedes every key in the store's object names (the URL's
    #: prefix and its '/'). It counts toward the store's 1024-byte name limit.
    object_name_prefix: str = ""

    def __init__(self, url: str, options: Mapping[str, Any] | None = None) -> None:
        self._url = url
        self._options: dict[str, Any] = dict(options or {})

    @classmethod
    @abstractmethod
    def open(cls, url: str, **options: Any) -> BaseMailbox:
        """Open the mailbox at ``url`` (without its query string) with ``options``.

        This is the factory ``gradientmail.from_url`` calls, and the one a plug-in names in
        the ``gradientmail.backends`` entry-point group. ``options`` are the URL's query
        parameters merged with the keyword arguments, as strings or Python values; an
        unknown option raises ``ConfigurationError`` listing the accepted ones (see
        :func:`gradientmail.backends._options.parse_options`).
        """

    # -- identity ---------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The URL this mailbox was opened with, without query options or credentials."""
        return self._url

    def supports(self, capability: Capability) -> bool:
        """Whether this mailbox declares ``capability``.

        Raises:
            ConfigurationError: ``capability`` is not a :class:`Capability`. A string such as
                ``"compare-and-swap"`` never names one, so answering ``False`` would mislead.
        """
        if not isinstance(capability, Capability):
            known = ", ".join(f"Capability.{c.name}" for c in Capability)
            raise ConfigurationError(
                f"supports() takes a gradientmail.Capability, not {type(capability).__name__} "
                f"{capability!r:.60}; one of {known}"
            )
        return capability in self.capabilities

    @property
    def max_key_bytes(self) -> int:
        """The longest key accepted, in UTF-8 bytes.

        1024 on memory:// and file://. Object stores limit the whole object name (prefix
        and key) to 1024 bytes, so their backends return 1024 minus the prefix's length; a
        longer key is rejected with ``InvalidKeyError`` before any request is sent.
        """
        return MAX_KEY_BYTES - len(self.object_name_prefix.encode("utf-8"))

    def _key(self, key: object) -> str:
        return validate_key(key, self.max_key_bytes)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} url={self._url!r}>"

    def __reduce__(self) -> tuple[Callable[..., Mailbox], tuple[str, dict[str, Any]]]:
        # Reopen from the URL and options in the receiving process: connections, file
        # descriptors and locks never travel.
        return (_restore, (self._url, self._options))

    def close(self) -> None:  # noqa: B027 - optional hook: most backends hold nothing
        """Release connections or descriptors. The mailbox reopens them if used again."""

    def __enter__(self) -> BaseMailbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the public contract ----------------------------------------------------------------

    def put_if_absent(self, key: str, data: BytesLike) -> bool:
        """See :meth:`Mailbox.put_if_absent`."""
        key = self._key(key)
        body = as_bytes(data)
        write_id = new_write_id()
        outcome = self._conditional(key, write_id, lambda: self._create(key, body, write_id))
        return outcome is not None

    def get(self, key: str) -> bytes:
        """See :meth:`Mailbox.get`. Transient failures are retried per the retry policy."""
        key = self._key(key)
        data: bytes = self._with_retries(key, lambda: self._read(key))[0]
        return data

    def list(self, prefix: str = "", *, start_after: str | None = None) -> Iterator[str]:
        """See :meth:`Mailbox.list` and :class:`~gradientmail.mailbox.SupportsListStartAfter`.

        The prefix and ``start_after`` are checked before this returns. With
        ``start_after``, a backend declaring ``Capability.LIST_START_AFTER`` starts the
        listing in the store; any other filters its full listing (same keys, full cost).
        """
        prefix = validate_prefix(prefix)
        if start_after is None:
            return self._iter_keys(prefix)
        if not isinstance(start_after, str):
            raise InvalidKeyError(
                start_after,
                f"start_after must be a key (str) or None, not {type(start_after).__name__}",
            )
        return self._iter_keys_after(prefix, start_after)

    def put(self, key: str, data: BytesLike) -> None:
        """See :meth:`Mailbox.put`."""
        key = self._key(key)
        body = as_bytes(data)
        self._with_retries(key, lambda: self._write(key, body, new_write_id()))

    def delete(self, key: str) -> None:
        """See :meth:`Mailbox.delete`."""
        key = self._key(key)
        self._with_retries(key, lambda: self._delete(key))

    def get_versioned(self, key: str) -> tuple[bytes, Version]:
        """See :meth:`Mailbox.get_versioned`."""
        key = self._key(key)
        self._require(Capability.COMPARE_AND_SWAP, "get_versioned")
        result: tuple[bytes, Version] = self._with_retries(key, lambda: self._read(key))
        return result

    def put_if_match(self, key: str, data: BytesLike, version: Version) -> Version | None:
        """See :meth:`Mailbox.put_if_match`."""
        key = self._key(key)
        body = as_bytes(data)
        self._require(Capability.COMPARE_AND_SWAP, "put_if_match")
        if not isinstance(version, Version):
            raise InvalidDataError(
                f"version must be a gradientmail.Version from get_versioned(), "
                f"not {type(version).__name__}"
            )
        write_id = new_write_id()
        return self._conditional(
            key, write_id, lambda: self._replace(key, body, version, write_id), replace=True
        )

    # -- primitives for backends ------------------------------------------------------------

    @abstractmethod
    def _create(self, key: str, data: bytes, write_id: str) -> Version | Conflict:
        """Store ``data`` only if ``key`` is absent, stamped with ``write_id``."""

    @abstractmethod
    def _read(self, key: str) -> tuple[bytes, Version]:
        """Return value and version; raise ``KeyNotFoundError`` if missing."""

    @abstractmethod
    def _stat(self, key: str) -> Stat | None:
        """Return the key's version and write id, or ``None`` if it does not exist."""

    @abstractmethod
    def _write(self, key: str, data: bytes, write_id: str) -> None:
        """Store ``data`` unconditionally."""

    @abstractmethod
    def _delete(self, key: str) -> None:
        """Remove ``key``; a missing key is not an error."""

    @abstractmethod
    def _iter_keys(self, prefix: str) -> Iterator[str]:
        """Yield keys starting with ``prefix`` in ascending order, page by page.

        Backends that fetch pages over the network retry each page fetch with
        ``self._with_retries`` (the base class cannot retry inside a generator).
        """

    def _iter_keys_after(self, prefix: str, start_after: str) -> Iterator[str]:
        """``_iter_keys(prefix)`` from the first key sorting after ``start_after``.

        Must yield exactly the keys ``_iter_keys(prefix)`` yields that are
        ``> start_after`` (``str`` order, which is UTF-8 byte order), in the same order.
        ``start_after`` is any ``str``: it need not exist, may lie outside ``prefix`` and
        may hold characters no key can. Backends that declare
        ``Capability.LIST_START_AFTER`` override this to start the listing in the store;
        this default reads the whole listing and skips.
        """
        return (key for key in self._iter_keys(prefix) if key > start_after)

    def _replace(
        self, key: str, data: bytes, version: Version, write_id: str
    ) -> Version | Conflict:
        """Store ``data`` only if the current version is ``version`` (``Conflict`` if not)."""
        raise NotSupportedError(f"{type(self).__name__} does not support compare-and-swap")

    # -- shared machinery -------------------------------------------------------------------

    def _require(self, capability: Capability, operation: str) -> None:
        if capability not in self.capabilities:
            raise NotSupportedError(
                f"{operation}() needs the {capability.value!r} capability, which "
                f"{type(self).__name__} ({self._url}) does not declare; check "
                f"mailbox.supports(Capability.{capability.name}) first"
            )

    def _with_retries(self, key: str, attempt: Callable[[], Any]) -> Any:
        """Run an idempotent operation, retrying transient failures per the retry policy."""
        policy = self.retry_policy
        for n in range(policy.attempts):
            try:
                return attempt()
            except TransientBackendError as exc:
                if n + 1 >= policy.attempts:
                    _log.debug("store error on %s, giving up: %s", redact(self._url), exc)
                    raise
                delay = policy.delay(n)
                self._log_retry(key, n, delay, exc)
                time.sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover

    def _log_retry(self, key: str, n: int, delay: float, exc: BaseException) -> None:
        _log.debug(
            "transient store error on %s (key %r, attempt %d of %d); retrying in %.3fs: %s",
            redact(self._url),
            key,
            n + 1,
            self.retry_policy.attempts,
            delay,
            exc,
        )

    def _conditional(
        self,
        key: str,
        write_id: str,
        attempt: Callable[[], Version | Conflict],
        *,
        replace: bool = False,
    ) -> Version | None:
        """Run a conditional write with retries; resolve ambiguous outcomes by reading back.

        An attempt is *ambiguous* when its request may have taken effect without this call
        hearing so: a lost response, a timeout, a 500. A request never sent (nothing
        listening) or answered as not carried out (throttled, in conflict with a concurrent
        request) is not ambiguous.

        Returns the stored version if our write is the one stored, ``None`` if it certainly
        is not: the precondition failed and no attempt before was ambiguous. Otherwise the
        outcome is decided by :meth:`_resolve`, which raises ``OutcomeUnknownError`` when it
        cannot tell. If every attempt fails and none was ambiguous, the last error is raised.
        """
        policy = self.retry_policy
        ambiguous = False  # an earlier attempt may have stored our write
        last_error: TransientBackendError | None = None
        for n in range(policy.attempts):
            try:
                outcome = attempt()
            except TransientBackendError as exc:
                last_error = exc
                ambiguous = ambiguous or not exc.not_carried_out
                if n + 1 < policy.attempts:
                    delay = policy.delay(n)
                    self._log_retry(key, n, delay, exc)
                    time.sleep(delay)
                continue
            if isinstance(outcome, Version):
                return outcome
            if outcome is Conflict.LOST and not ambiguous:
                return None
            return self._resolve(key, write_id, replace=replace, cause=None)
        assert last_error is not None
        _log.debug("store error on %s, giving up: %s", redact(self._url), last_error)
        if not ambiguous:
            raise last_error
        return self._resolve(key, write_id, replace=replace, cause=last_error)

    def _resolve(
        self, key: str, write_id: str, *, replace: bool, cause: BackendError | None
    ) -> Version:
        """Decide a conditional write after an ambiguous attempt, by reading its write id back.

        Returns the stored version when the key holds our write id: our write landed.
        Anything else raises ``OutcomeUnknownError``, never ``False``/``None``:

        * the key holds another writer's object (or one without a write id). Our write may
          have been refused, or it may have landed and been replaced before the read-back
          (overwritten by ``put``, or deleted and created again): nothing stored tells the
          two apart. This holds for ``put_if_absent`` as for ``put_if_match``.
        * the key is missing: an earlier attempt may still be in flight, or ours landed and
          was deleted.
        * the read-back itself failed.

        A definite loss (``False`` from ``put_if_absent``, ``None`` from ``put_if_match``)
        comes only from :meth:`_conditional`: a precondition failure with no ambiguous
        attempt before it.
        """
        try:
            stat: Stat | None = self._with_retries(key, lambda: self._stat(key))
        except BackendError as exc:
            raise OutcomeUnknownError(
                "a conditional write may have been stored, and reading the key back failed",
                key=key,
                backend=self._url,
            ) from exc
        if stat is not None and stat.write_id == write_id:
            return stat.version
        if stat is None:
            reason = (
                "the key is missing: an earlier attempt may still be in flight, or ours "
                "landed and was deleted"
            )
        else:
            reason = (
                "another writer's object is stored: ours may have been refused, or may have "
                "landed and been replaced (overwritten, or deleted and created again)"
            )
        write = "compare-and-swap" if replace else "create-if-absent"
        raise OutcomeUnknownError(
            f"a {write} failed ambiguously (an earlier attempt may have taken effect) and {reason}",
            key=key,
            backend=self._url,
        ) from cause
