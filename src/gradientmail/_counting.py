"""The one counting door: :class:`Counting` counts every request a mailbox makes.

A pattern's figures of what it costs in store requests (``queue.stats.cost``), a test's
counts of what a run would be billed (:class:`~gradientmail.testing.LatencyMailbox`), and
any other tally by key group are views of what one wrapper counted, under the requests it
counts (a queue's claims, completions, scans and idle polls, an exchange's reads and
writes; a queue's lease and manifest check, and a session's publishing, are not counted
here: the lease counts its own renewals). Each request is counted before it is sent, whatever
its outcome (a missing key is still a request): one per call, and one per page of
``page_size`` keys of a listing, as S3, GCS and Azure bill them, a page counted only once
a key of it is asked for (an empty listing is one page). Beside the requests it counts
the bytes sent and received, and for each listing the call and the keys it returned.

What is counted is keyed by ``(measure, label, operation, group)``:

* ``measure``: :data:`REQUESTS`, :data:`SENT`, :data:`RECEIVED` (bytes), :data:`KEYS` (keys
  listed), or :data:`CALLS` (listing calls, however many pages);
* ``label``: which door counted it, when several doors share one :class:`RequestTally` (a
  learner's takeovers count their scans under their own label);
* ``operation``: ``create`` (``put_if_absent``), ``get``, ``get_versioned``, ``put``,
  ``swap`` (``put_if_match``), ``delete``, or ``list_page`` (``list`` for calls and keys);
* ``group``: the door's ``group`` of the key, or of a listing's prefix
  (:func:`key_group` by default).

Counting is exact and thread safe: doors share a :class:`RequestTally`, whose
:meth:`RequestTally.counts` is an immutable :class:`RequestCounts`.
"""

from __future__ import annotations

import itertools
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from gradientmail._errors import ConfigurationError
from gradientmail._forwarding import Forwarding, list_after, takes_start_after
from gradientmail.mailbox import BytesLike, Capability, Mailbox, Version

__all__ = [
    "CALLS",
    "KEYS",
    "OPERATIONS",
    "RECEIVED",
    "REQUESTS",
    "SENT",
    "Counting",
    "RequestCounts",
    "RequestTally",
    "key_group",
]

#: The measures counted.
REQUESTS, SENT, RECEIVED, KEYS, CALLS = "requests", "sent", "received", "keys", "calls"

#: The operations counted as requests: ``create`` is ``put_if_absent``, ``swap`` is
#: ``put_if_match``, ``list_page`` one page of a listing.
OPERATIONS = ("create", "get", "get_versioned", "put", "swap", "delete", "list_page")

#: What a count is kept under: ``(measure, label, operation, group)``.
CountKey = tuple[str, str, str, str]


def key_group(key: str) -> str:
    """The default group of a key: its first path segment, after ``epochs/{k}/`` if any.

    For a ``shared_queue`` run this is ``units`` (claims), ``done`` (completion records),
    ``leases``, ``reclaimed``, ``learners``, ``manifest`` ...; a listing is grouped by its
    prefix the same way.
    """
    if key.startswith("epochs/"):
        parts = key.split("/", 2)
        key = parts[2] if len(parts) == 3 else ""
    return key.split("/", 1)[0]


class RequestCounts(Mapping[tuple[str, str], int]):
    """What doors counted: an immutable snapshot. Add two with ``+``.

    As a mapping it holds the requests by ``(operation, group)``, over every label; the
    methods read the other measures.
    """

    def __init__(self, counts: Mapping[Any, int] | None = None) -> None:
        full: Counter[CountKey] = Counter()
        for key, n in (counts or {}).items():
            if len(key) == 2:  # (operation, group): requests, as this type was once built
                key = (REQUESTS, "", *key)
            full[key] += n
        self._full = full
        requests: Counter[tuple[str, str]] = Counter()
        for (measure, _, operation, group), n in full.items():
            if measure == REQUESTS:
                requests[operation, group] += n
        self._counts = dict(requests)

    def __getitem__(self, key: tuple[str, str]) -> int:
        return self._counts.get(key, 0)

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter(self._counts)

    def __len__(self) -> int:
        return len(self._counts)

    def __add__(self, other: RequestCounts) -> RequestCounts:
        return RequestCounts(self._full + other._full)

    def __repr__(self) -> str:
        return f"RequestCounts({self._counts!r})"

    def total(self, operation: str | None = None, group: str | None = None) -> int:
        """Requests of ``operation`` (any if ``None``) on keys of ``group`` (any if ``None``)."""
        return self.measured(REQUESTS, operation=operation, group=group)

    def by_operation(self) -> dict[str, int]:
        """Requests per operation, over every group."""
        out: Counter[str] = Counter()
        for (operation, _), n in self._counts.items():
            out[operation] += n
        return dict(out)

    def measured(
        self,
        measure: str,
        *,
        operation: str | None = None,
        group: str | None = None,
        label: str | None = None,
    ) -> int:
        """The sum of ``measure`` (:data:`REQUESTS`, :data:`SENT`, :data:`RECEIVED`,
        :data:`KEYS`, :data:`CALLS`) over what matches (``None`` matches anything)."""
        return sum(
            n
            for (m, lab, op, grp), n in self._full.items()
            if m == measure
            and (operation is None or op == operation)
            and (group is None or grp == group)
            and (label is None or lab == label)
        )


class RequestTally:
    """Counts shared by any number of :class:`Counting` doors; thread safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[CountKey] = Counter()

    def add(self, measure: str, label: str, operation: str, group: str, n: int = 1) -> None:
        """Count ``n`` of ``measure``."""
        with self._lock:
            self._counts[measure, label, operation, group] += n

    def counts(self) -> RequestCounts:
        """A snapshot of what was counted so far (built outside the lock: the doors' next
        requests do not wait for it)."""
        with self._lock:
            counted = self._counts.copy()
        return RequestCounts(counted)

    def reset(self) -> RequestCounts:
        """Return what was counted so far and start counting from zero."""
        with self._lock:
            counted, self._counts = self._counts, Counter()
        return RequestCounts(counted)


class Counting(Forwarding):
    """A :class:`~gradientmail.Mailbox` that counts each request to ``inner`` into a tally.

    Results and errors are ``inner``'s own; URL, capabilities and key limit are passed
    through, so code behind the door behaves as it would on ``inner`` (an ``inner`` whose
    ``list`` predates ``start_after`` declares no ``LIST_START_AFTER`` here). A pickled door
    reopens ``inner`` as ``inner``'s own pickle does, with a tally of its own.

    Args:
        inner: the mailbox to count the requests of.
        tally: where to count (shared with other doors); a new one when ``None``.
        label: what this door's counts are labelled (see the module docstring).
        group: maps a key (or a listing's prefix) to the group it is counted under.
        page_size: keys per counted listing page (1000, as S3, GCS and Azure page).
    """

    def __init__(
        self,
        inner: Mailbox,
        tally: RequestTally | None = None,
        *,
        label: str = "",
        group: Callable[[str], str] = key_group,
        page_size: int = 1000,
    ) -> None:
        if page_size < 1:
            raise ConfigurationError(f"page_size must be at least 1, got {page_size}")
        self.inner = inner
        self.tally = RequestTally() if tally is None else tally
        self.label = label
        self.page_size = page_size
        self._group = group
        self._start_after = takes_start_after(inner)

    @property
    def capabilities(self) -> frozenset[Capability]:
        """``inner``'s capabilities (without partial listings where its ``list`` cannot)."""
        declared = self.inner.capabilities
        return declared if self._start_after else declared - {Capability.LIST_START_AFTER}

    def supports(self, capability: Capability) -> bool:
        """Whether ``inner`` declares ``capability`` (and can, for partial listings)."""
        return capability in self.capabilities

    def __getstate__(self) -> dict[str, object]:
        state = self.__dict__.copy()
        del state["tally"]
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self.tally = RequestTally()

    def counts(self) -> RequestCounts:
        """A snapshot of the tally's counts (every door sharing it included)."""
        return self.tally.counts()

    def _request(self, operation: str, key: str, sent: BytesLike | None = None) -> str:
        """Count one request of ``operation`` on ``key`` (and the bytes it sends); its group."""
        group = self._group(key)
        tally, label = self.tally, self.label
        tally.add(REQUESTS, label, operation, group)
        if sent is not None:
            tally.add(SENT, label, operation, group, memoryview(sent).nbytes)
        self._sending(operation)
        return group

    def _received(self, operation: str, group: str, data: bytes) -> None:
        self.tally.add(RECEIVED, self.label, operation, group, len(data))

    def _sending(self, operation: str) -> None:
        """Called once per request counted, as it leaves (a latency may be waited here)."""

    # -- the Mailbox protocol, counted (the declarations by Forwarding) -----------------------

    def put_if_absent(self, key: str, data: BytesLike) -> bool:
        """``inner.put_if_absent``, counted as ``create``."""
        self._request("create", key, data)
        return self.inner.put_if_absent(key, data)

    def get(self, key: str) -> bytes:
        """``inner.get``, counted as ``get``."""
        group = self._request("get", key)
        data = self.inner.get(key)
        self._received("get", group, data)
        return data

    def get_versioned(self, key: str) -> tuple[bytes, Version]:
        """``inner.get_versioned``, counted as ``get_versioned``."""
        group = self._request("get_versioned", key)
        data, version = self.inner.get_versioned(key)
        self._received("get_versioned", group, data)
        return data, version

    def put(self, key: str, data: BytesLike) -> None:
        """``inner.put``, counted as ``put``."""
        self._request("put", key, data)
        self.inner.put(key, data)

    def put_if_match(self, key: str, data: BytesLike, version: Version) -> Version | None:
        """``inner.put_if_match``, counted as ``swap``."""
        self._request("swap", key, data)
        return self.inner.put_if_match(key, data, version)

    def delete(self, key: str) -> None:
        """``inner.delete``, counted as ``delete``."""
        self._request("delete", key)
        self.inner.delete(key)

    def list(self, prefix: str = "", *, start_after: str | None = None) -> Iterator[str]:
        """``inner.list``, counted as one call and one ``list_page`` per ``page_size`` keys.

        The first page is counted when iteration starts; the next one only when a key past
        the previous page is asked for, as a paged listing fetches them. ``start_after`` is
        passed on when given; pages are counted from there, as a store that declares
        ``Capability.LIST_START_AFTER`` bills them.
        """
        keys = list_after(self.inner, prefix, start_after, self._start_after)
        return self._paged(prefix, keys)

    def _paged(self, prefix: str, keys: Iterator[str]) -> Iterator[str]:
        group = self._group(prefix)
        self.tally.add(CALLS, self.label, "list", group)
        self._request("list_page", prefix)
        listed = 0
        try:
            page = list(itertools.islice(keys, self.page_size))
            while page:
                for key in page:
                    listed += 1
                    yield key
                if len(page) < self.page_size:
                    return
                page = list(itertools.islice(keys, self.page_size))  # the next page, if any
                if page:
                    self._request("list_page", prefix)
        finally:
            # The keys this listing returned, once it ends, or is dropped part-way.
            self.tally.add(KEYS, self.label, "list", group, listed)
