"""``ObjectStoreMailbox``: what the S3, GCS and Azure backends share, written once.

A cloud backend subclasses :class:`ObjectStoreMailbox`, declares its :class:`StoreURL` and
the options it accepts, and supplies:

* ``_connect`` / ``_disconnect``: make and close this process's SDK client;
* ``_sdk_errors`` and ``_map_error``: the SDK's exception types, and how each becomes a
  gradientmail error, most specific first;
* the primitives of :class:`~gradientmail.backends._base.BaseMailbox` and ``_list_page``.

``ObjectStoreMailbox`` supplies the rest:

* **URLs and options.** ``scheme://CONTAINER/PREFIX`` is split and checked by one parser
  (:func:`~gradientmail.backends._options.split_store_url`) and options by
  :func:`~gradientmail.backends._options.parse_options`; every object store accepts
  ``connect_timeout`` and ``read_timeout`` (seconds). The constructor is the same on all
  three: ``Backend(container, prefix="", **options)``.
* **Object names.** A key is stored as the object ``PREFIX/KEY`` (``KEY`` without a
  prefix). The store limits the whole name to 1024 bytes, so
  :attr:`~gradientmail.backends._base.BaseMailbox.max_key_bytes` is 1024 minus the prefix's
  length.
* **One client per process.** The client is made on first use, under a lock, and made
  again in a process forked from the one that made it (an SDK client's connections must
  never be shared across processes) or after :meth:`close`.
* **One error boundary.** Every SDK call runs inside ``with self._mapped(key):``, which
  turns the SDK's own exception types, and only those, into gradientmail errors with the
  original chained. Any other exception is a bug in gradientmail and propagates as itself.
* **Retries, decided once.** SDK retries are switched off in every backend: the shared
  :class:`~gradientmail.backends._base.RetryPolicy` makes every retry, so each attempt is
  exactly one request and a precondition failure is known to answer the only request sent.
* **Listing.** ``list`` fetches one page of names per request, lazily, each page through
  the retry policy. Names that break the key rules (``dir/`` markers, ``a//b``, written by
  other tools) are skipped, since no operation could be called with them.
* **Partial listings.** A backend declaring ``Capability.LIST_START_AFTER`` receives, in
  ``_list_page``, the object name the listing starts after, and asks the store to start
  there. That name is ``start_after`` translated as keys are (``PREFIX/`` + the key), cut
  short before any character no key can hold and to the store's name limit; cutting only
  ever moves the start earlier, and every key the store returns at or before
  ``start_after`` is dropped here, so the keys are exactly those of the full listing after
  ``start_after`` (an inclusive start, as GCS's, loses its boundary name that way too). A
  backend without the capability filters the full listing (the default of
  :class:`~gradientmail.backends._base.BaseMailbox`).

Pickling: a mailbox pickles as its URL and the options it was opened with, and reopens with
a fresh client in the receiving process. Options may be secrets (an Azure connection
string or a SAS token): the pickle then carries them, in clear.
"""

from __future__ import annotations

import os
import re
import threading
import weakref
from abc import abstractmethod
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar, TypeVar

from gradientmail._errors import (
    BackendError,
    EndpointUnreachableError,
    GradientMailError,
    InvalidKeyError,
    TransientBackendError,
)
from gradientmail._keys import validate_key
from gradientmail.backends._base import BaseMailbox, Stat
from gradientmail.backends._options import parse_options, positive_float, split_store_url
from gradientmail.mailbox import Capability, Version

__all__ = [
    "PAGE_SIZE",
    "POOL_CONNECTIONS",
    "TIMEOUT_OPTIONS",
    "ObjectStoreMailbox",
    "StoreURL",
    "start_hint",
]

_Error = TypeVar("_Error", bound=BackendError)

#: Names fetched per listing request.
PAGE_SIZE = 1000
#: HTTP connections each client keeps: racing threads sharing one mailbox each hold one.
POOL_CONNECTIONS = 64
#: Options every object store accepts: seconds to wait for a connection, and for an answer.
TIMEOUT_OPTIONS: Mapping[str, Callable[[Any], Any]] = {
    "connect_timeout": positive_float,
    "read_timeout": positive_float,
}

# Statuses by which a store says it did not carry a request out (timeout, conflict,
# throttling, unavailable): a conditional write answered so was certainly not stored.
# A 500, 502 or 504 may follow a write that landed, so those leave the outcome open.
_NOT_CARRIED_OUT = frozenset({408, 409, 429, 503})


@dataclass(frozen=True)
class StoreURL:
    """How one store's mailbox URLs look: ``scheme://CONTAINER/PREFIX``."""

    #: The URL scheme, e.g. ``"s3"``.
    scheme: str
    #: The store's name for messages, e.g. ``"S3"``.
    store: str
    #: What the store calls a container, e.g. ``"bucket"``.
    container: str
    #: The pattern a container name must match in full.
    name: re.Pattern[str]
    #: The naming rule in words, for messages.
    name_rule: str

    @property
    def example(self) -> str:
        """An example URL phrase for messages, e.g. ``"e.g. s3://my-bucket/run1"``."""
        return f"e.g. {self.scheme}://my-{self.container}/run1"

    def split(self, url: str) -> tuple[str, str]:
        """(container, prefix) of ``url``; see :func:`split_store_url` for what is refused."""
        return split_store_url(
            url,
            store=self.store,
            container=self.container,
            name=self.name,
            name_rule=self.name_rule,
            example=self.example,
        )

    def join(self, container: str, prefix: str) -> str:
        """The URL of ``container`` and ``prefix``; :meth:`split` gives them back unchanged.

        ``%``, ``?`` and ``#`` in the prefix are quoted, so that a pickled mailbox reopens
        exactly this prefix. (The pickle carries the options too: Azure's account key or
        SAS token, in clear, when the mailbox was opened with one.)
        """
        path = prefix.replace("%", "%25").replace("?", "%3F").replace("#", "%23")
        return f"{self.scheme}://{container}/{path}" if path else f"{self.scheme}://{container}"


# What no key holds: control characters (as the key rules), a backslash, and surrogates,
# which have no UTF-8 form and so could not be sent to a store at all.
_NOT_IN_KEYS = re.compile(r"[\x00-\x1f\x7f-\x9f\\\ud800-\udfff]")


def start_hint(start_after: str, max_bytes: int) -> str:
    """The longest leading part of ``start_after`` that a store can be asked to start after.

    ``start_after`` may be any ``str``; a store takes only names it could hold. The hint
    stops before the first character no key can hold, and at ``max_bytes`` bytes of UTF-8
    (whole characters). It is a leading part, so it never sorts after ``start_after``:
    a listing started after it holds every key that sorts after ``start_after``, plus
    perhaps a few before it, which the caller drops.
    """
    found = _NOT_IN_KEYS.search(start_after)
    hint = start_after if found is None else start_after[: found.start()]
    if len(hint) * 4 <= max_bytes:  # UTF-8 takes at most 4 bytes a character
        return hint
    encoded = hint.encode("utf-8")[:max_bytes]
    return encoded.decode("utf-8", errors="ignore")  # drops a character cut in two


# Every live mailbox, so that a forked child can replace the client locks, which another
# thread of the parent may have held at the moment of the fork.
_LIVE: weakref.WeakSet[ObjectStoreMailbox] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for box in list(_LIVE):
        box._client_lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


class ObjectStoreMailbox(BaseMailbox):
    """Base class of the S3, GCS and Azure mailboxes; see the module docstring."""

    capabilities: ClassVar[frozenset[Capability]] = frozenset(
        {Capability.ATOMIC_CREATE, Capability.COMPARE_AND_SWAP, Capability.SHARED_ACROSS_PROCESSES}
    )
    #: The store's URL form and naming rules.
    layout: ClassVar[StoreURL]
    #: The backend's own options, besides :data:`TIMEOUT_OPTIONS`: name → converter (called
    #: on the raw value; may raise ``ValueError``).
    accepted_options: ClassVar[Mapping[str, Callable[[Any], Any]]]
    #: Values of the options not given.
    option_defaults: ClassVar[Mapping[str, Any]] = {"connect_timeout": 3.0, "read_timeout": 60.0}
    #: The object metadata field holding the write id of the write that stored the object.
    write_id_metadata: ClassVar[str]
    #: Names fetched per listing request, and HTTP connections kept per client.
    page_size: ClassVar[int] = PAGE_SIZE
    pool_connections: ClassVar[int] = POOL_CONNECTIONS

    def __init__(self, container: str, prefix: str = "", **options: Any) -> None:
        """Open the mailbox under ``prefix`` in ``container``.

        Args:
            container: the bucket or container, which must already exist.
            prefix: the folder the keys live in (``""`` for the container's root); leading
                and trailing ``/`` are ignored.
            **options: the backend's options, as strings or Python values.

        Raises:
            ConfigurationError: an unknown or invalid option, or one the SDK refuses.
            MissingDependencyError: the backend's SDK is not installed.
        """
        prefix = prefix.strip("/")
        super().__init__(self.layout.join(container, prefix), options)
        self._settings = parse_options(
            self.layout.scheme, options, self._all_options(), self.option_defaults
        )
        self.container = container
        #: The URL's prefix, without a leading or trailing ``/`` (``""`` for none).
        self.prefix = prefix
        self.object_name_prefix = prefix + "/" if prefix else ""
        self._timeouts: tuple[float, float] = (
            self._settings["connect_timeout"],
            self._settings["read_timeout"],
        )
        #: Where the store is, for messages: never with credentials or a query.
        self._endpoint = f"the {self.layout.store} endpoint"
        self._client_lock = threading.Lock()
        self._client_pid = 0
        self._client_ref: Any = None
        _LIVE.add(self)
        self._client()  # configuration and credential errors surface now, not on first use

    @property
    def bucket(self) -> str:
        """The container's name, by the name S3 and GCS give it."""
        return self.container

    @classmethod
    def open(cls, url: str, **options: Any) -> ObjectStoreMailbox:
        """Open ``scheme://CONTAINER/PREFIX`` with ``options``.

        Raises:
            ConfigurationError: a malformed URL or container name, credentials in the URL,
                or an unknown or invalid option (the message lists the accepted ones).
            MissingDependencyError: the backend's SDK is not installed (the message names
                the pip extra).
        """
        parse_options(cls.layout.scheme, options, cls._all_options())  # before the URL
        container, prefix = cls.layout.split(url)
        return cls(container, prefix, **options)

    @classmethod
    def _all_options(cls) -> dict[str, Callable[[Any], Any]]:
        return {**TIMEOUT_OPTIONS, **cls.accepted_options}

    # -- what each backend supplies -----------------------------------------------------------

    @abstractmethod
    def _connect(self) -> Any:
        """Make this process's SDK client (or handle) from ``self._settings``."""

    @abstractmethod
    def _disconnect(self, client: Any) -> None:
        """Close ``client``'s connections."""

    @abstractmethod
    def _sdk_errors(self) -> tuple[type[BaseException], ...]:
        """The exception types the SDK and its transport raise, which ``_map_error`` maps."""

    @abstractmethod
    def _map_error(self, exc: BaseException, key: str | None) -> GradientMailError:
        """The gradientmail error for one of the SDK's exceptions (see ``_sdk_errors``)."""

    @abstractmethod
    def _list_page(
        self, names: str, token: str | None, *, start_after: str | None = None
    ) -> tuple[list[str], str | None]:
        """One page of the object names starting with ``names``, and the next page's token.

        ``token`` is ``None`` for the first page; ``None`` comes back after the last one.
        ``start_after`` is given, on every page of one listing, only to backends declaring
        ``Capability.LIST_START_AFTER``: an object name to start the listing after. The
        caller drops the names at or before it, so an inclusive start (the name itself
        returned first) is fine.
        """

    # -- shared machinery ---------------------------------------------------------------------

    def _client(self) -> Any:
        """This process's client, made on first use, after a fork, and after :meth:`close`."""
        client = self._client_ref
        if client is None or self._client_pid != os.getpid():
            with self._client_lock:
                if self._client_ref is None or self._client_pid != os.getpid():
                    with self._mapped(None):
                        self._client_ref = self._connect()
                    self._client_pid = os.getpid()
                client = self._client_ref
        return client

    def close(self) -> None:
        """Close the client's connections; the next operation makes a new client."""
        with self._client_lock:
            client, self._client_ref = self._client_ref, None
        if client is not None and self._client_pid == os.getpid():
            with self._mapped(None):
                self._disconnect(client)

    @contextmanager
    def _mapped(self, key: str | None) -> Iterator[None]:
        """The error boundary: the SDK's exceptions leave it as gradientmail errors."""
        try:
            yield
        except GradientMailError:
            raise  # already ours: a missing key, a missing SDK, a bad option
        except self._sdk_errors() as exc:
            raise self._map_error(exc, key) from exc

    def _name(self, key: str) -> str:
        """The object name of ``key``."""
        return self.object_name_prefix + key

    def _stamp(self, write_id: str) -> dict[str, str]:
        """The object metadata that carries ``write_id``."""
        return {self.write_id_metadata: write_id}

    def _stat_of(self, version: object, metadata: Mapping[str, str] | None) -> Stat:
        """An object's version, and the write id in its metadata (``None``: not ours)."""
        return Stat(Version(str(version)), (metadata or {}).get(self.write_id_metadata))

    # The errors every store maps to alike; each backend's ``_map_error`` uses them.

    def _failure(self, kind: type[_Error], key: str | None, message: str) -> _Error:
        """A ``kind`` error about ``key`` in this mailbox; ``message`` holds no secret."""
        return kind(message, key=key, backend=self.url)

    def _unreachable(self, key: str | None, fix: str) -> EndpointUnreachableError:
        """Nothing answered at the endpoint: the request was never sent."""
        message = f"nothing answered at {self._endpoint}; {fix}"
        return self._failure(EndpointUnreachableError, key, message)

    def _interrupted(self, exc: BaseException, key: str | None) -> TransientBackendError:
        """Sent, but the answer was lost or timed out: the request may have taken effect."""
        message = (
            f"the connection to {self._endpoint} failed mid-request ({type(exc).__name__}); "
            "retrying may succeed"
        )
        return self._failure(TransientBackendError, key, message)

    def _transient(self, status: int, said: str, key: str | None) -> TransientBackendError:
        """An HTTP answer worth retrying (5xx, 408, 409 conflicts, 429).

        ``not_carried_out`` is set when the answer says the request was not carried out, so
        that a conditional write answered so is not counted as one that may have landed.
        """
        message = f"{self.layout.store} answered {said} (transient); retrying may succeed"
        error = self._failure(TransientBackendError, key, message)
        error.not_carried_out = status in _NOT_CARRIED_OUT
        return error

    def _iter_keys(self, prefix: str) -> Iterator[str]:
        return self._listing(prefix, None)

    def _iter_keys_after(self, prefix: str, start_after: str) -> Iterator[str]:
        """The keys under ``prefix`` after ``start_after``: the store starts there if it can.

        Without ``Capability.LIST_START_AFTER`` this is the base class's filtered full
        listing. With it, the store is asked to start after :func:`start_hint` of
        ``start_after`` (unless that sorts at or before ``prefix``, where nothing would be
        skipped), and names at or before ``start_after`` are dropped.
        """
        if Capability.LIST_START_AFTER not in self.capabilities:
            return super()._iter_keys_after(prefix, start_after)
        hint = start_hint(start_after, self.max_key_bytes)
        start = self._name(hint) if hint > prefix else None
        return (key for key in self._listing(prefix, start) if key > start_after)

    def _listing(self, prefix: str, start: str | None) -> Iterator[str]:
        """Keys under ``prefix`` page by page; the store starts after object name ``start``."""
        names = self.object_name_prefix + prefix
        start_at = len(self.object_name_prefix)
        token: str | None = None
        while True:
            fetch = partial(self._fetch_page, names, token, start)
            page, token = self._with_retries(prefix, fetch)
            for name in page:
                key = name[start_at:]
                try:
                    validate_key(key)
                except InvalidKeyError:
                    continue  # e.g. "dir/" markers or "a//b" written by other tools
                yield key
            if not token:
                return

    def _fetch_page(
        self, names: str, token: str | None, start: str | None
    ) -> tuple[list[str], str | None]:
        with self._mapped(None):
            if start is None:
                return self._list_page(names, token)
            return self._list_page(names, token, start_after=start)
