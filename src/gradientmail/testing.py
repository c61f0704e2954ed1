"""Testing utilities: run your loader against a store that is slow the way a cloud store is.

:class:`LatencyMailbox` wraps any :class:`~gradientmail.Mailbox`, delegates every operation
to it, waits a per-request latency drawn from a :class:`Latency` before each request, and
counts the requests by operation and by a group derived from the key. With it, a test or a
benchmark on ``memory://`` or ``file://`` sees the request latencies of an object store and
reports what a run would be billed, without a cloud account::

    from gradientmail import from_url
    from gradientmail.testing import S3_LIKE, LatencyMailbox

    box = LatencyMailbox(from_url("memory://my-test"), S3_LIKE)
    box.put_if_absent("units/u1", b"mine")
    box.get("units/u1")
    print(box.counts().total())          # 2
    print(box.counts().by_operation())   # {'create': 1, 'get': 1}

Counting is exact and thread safe: share one wrapper among threads, or give each its own
and add their :class:`RequestCounts` together. A listing is counted (and delayed) once per
page of ``page_size`` keys, as S3, GCS and Azure bill it; an empty listing is one page.

The latency presets are lognormal distributions fitted to a median (p50) and a 99th
percentile (p99), in seconds. They are typical published figures for small objects read and
written from a machine in the same region, not measurements of any particular bucket:

* :data:`S3_LIKE`: p50 15 ms, p99 60 ms (S3 Standard, small PUT and GET);
* :data:`GCS_LIKE`: p50 25 ms, p99 100 ms (Cloud Storage, single-region, small writes);
* :data:`AZURE_LIKE`: p50 8 ms, p99 40 ms (Blob Storage hot tier, small blocks).

Local emulators (moto, fake-gcs-server, Azurite) answer on loopback in about 1-3 ms, so
they show the protocol's request count but not a cloud's waiting; measure your own store
with ``benchmarks/backends.py`` (emulators) or with this module's counts and your own
timings, and pass a :class:`Latency` of your own.
"""

from __future__ import annotations

import itertools
import math
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from gradientmail._errors import ConfigurationError
from gradientmail._forwarding import Forwarding
from gradientmail.mailbox import (
    BytesLike,
    Mailbox,
    SupportsListStartAfter,
    Version,
)

__all__ = [
    "AZURE_LIKE",
    "GCS_LIKE",
    "NO_LATENCY",
    "S3_LIKE",
    "Latency",
    "LatencyMailbox",
    "RequestCounts",
    "key_group",
]

#: The z-score of the 99th percentile of a standard normal distribution.
_Z99 = 2.3263478740408408


@dataclass(frozen=True)
class Latency:
    """A per-request latency: lognormal with median ``p50`` and 99th percentile ``p99``.

    ``p99 == p50`` is a constant latency; ``p50 == 0`` is none. Both are seconds.

    Raises:
        ConfigurationError: a negative value, or ``p99 < p50``.
    """

    p50: float
    p99: float

    def __post_init__(self) -> None:
        if self.p50 < 0 or self.p99 < self.p50:
            raise ConfigurationError(
                f"a latency needs 0 <= p50 <= p99, got p50={self.p50} and p99={self.p99}"
            )

    @property
    def sigma(self) -> float:
        """The standard deviation of the latency's logarithm."""
        if self.p50 == 0 or self.p99 == self.p50:
            return 0.0
        return math.log(self.p99 / self.p50) / _Z99

    @property
    def mean(self) -> float:
        """The mean latency in seconds."""
        return self.p50 * math.exp(self.sigma**2 / 2)

    def draw(self, rng: random.Random) -> float:
        """One latency in seconds, drawn from ``rng``."""
        if self.p50 == 0:
            return 0.0
        sigma = self.sigma
        return self.p50 if sigma == 0 else self.p50 * math.exp(sigma * rng.gauss(0.0, 1.0))


NO_LATENCY = Latency(0.0, 0.0)
S3_LIKE = Latency(0.015, 0.060)
GCS_LIKE = Latency(0.025, 0.100)
AZURE_LIKE = Latency(0.008, 0.040)

#: The operations counted: ``create`` is ``put_if_absent``, ``swap`` is ``put_if_match``,
#: ``list_page`` one page of a listing.
OPERATIONS = ("create", "get", "get_versioned", "put", "swap", "delete", "list_page")


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
    """Requests counted by ``(operation, group)``: an immutable snapshot.

    Operations are those of :data:`OPERATIONS`; groups come from the wrapper's ``group``
    function (:func:`key_group` by default). Add two snapshots with ``+``.
    """

    def __init__(self, counts: Mapping[tuple[str, str], int] | None = None) -> None:
        self._counts = dict(counts or {})

    def __getitem__(self, key: tuple[str, str]) -> int:
        return self._counts.get(key, 0)

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter(self._counts)

    def __len__(self) -> int:
        return len(self._counts)

    def __add__(self, other: RequestCounts) -> RequestCounts:
        total = Counter(self._counts)
        total.update(other._counts)
        return RequestCounts(total)

    def __repr__(self) -> str:
        return f"RequestCounts({self._counts!r})"

    def total(self, operation: str | None = None, group: str | None = None) -> int:
        """Requests of ``operation`` (any if ``None``) on keys of ``group`` (any if ``None``)."""
        return sum(
            n
            for (op, grp), n in self._counts.items()
            if (operation is None or op == operation) and (group is None or grp == group)
        )

    def by_operation(self) -> dict[str, int]:
        """Requests per operation, over every group."""
        out: Counter[str] = Counter()
        for (op, _), n in self._counts.items():
            out[op] += n
        return dict(out)


class LatencyMailbox(Forwarding):
    """A :class:`~gradientmail.Mailbox` that delays and counts each request to ``inner``.

    Every method delegates to ``inner`` after waiting one latency drawn from ``latency``
    (each page of a listing waits too), and counts the request. Results and errors are
    ``inner``'s own; capabilities, URL and key limit are passed through, so code under test
    behaves as it would on ``inner``. A pickled wrapper reopens ``inner`` as ``inner``'s own
    pickle does, with fresh counts.

    Args:
        inner: the mailbox to delegate to.
        latency: the per-request latency (:data:`NO_LATENCY` counts without waiting).
        seed: seeds the latency draws, so a run's latencies repeat.
        page_size: keys per counted listing page (1000, as S3, GCS and Azure page).
        group: maps a key (or a listing's prefix) to the group it is counted under.
        sleep: how to wait a latency; a test can pass a fake to observe the latencies.
    """

    def __init__(
        self,
        inner: Mailbox,
        latency: Latency = NO_LATENCY,
        *,
        seed: int | str | None = None,
        page_size: int = 1000,
        group: Callable[[str], str] = key_group,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if page_size < 1:
            raise ConfigurationError(f"page_size must be at least 1, got {page_size}")
        self.inner = inner
        self.latency = latency
        self.page_size = page_size
        self._group = group
        self._sleep = sleep
        self._seed = seed
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._counts: Counter[tuple[str, str]] = Counter()

    def __getstate__(self) -> dict[str, object]:
        state = self.__dict__.copy()
        del state["_lock"], state["_counts"], state["_rng"]
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self._rng = random.Random(self._seed)
        self._lock = threading.Lock()
        self._counts = Counter()

    def _request(self, operation: str, key: str) -> None:
        """Count one request and wait its latency (outside the lock)."""
        with self._lock:
            self._counts[operation, self._group(key)] += 1
            wait = self.latency.draw(self._rng)
        if wait > 0:
            self._sleep(wait)

    def counts(self) -> RequestCounts:
        """A snapshot of the requests counted so far."""
        with self._lock:
            return RequestCounts(self._counts)

    def reset_counts(self) -> RequestCounts:
        """Return the counts so far and start counting from zero."""
        with self._lock:
            snapshot = RequestCounts(self._counts)
            self._counts = Counter()
        return snapshot

    # -- the Mailbox protocol, delegated (the declarations by Forwarding) ---------------------

    def put_if_absent(self, key: str, data: BytesLike) -> bool:
        """``inner.put_if_absent``, counted as ``create``."""
        self._request("create", key)
        return self.inner.put_if_absent(key, data)

    def get(self, key: str) -> bytes:
        """``inner.get``, counted as ``get``."""
        self._request("get", key)
        return self.inner.get(key)

    def get_versioned(self, key: str) -> tuple[bytes, Version]:
        """``inner.get_versioned``, counted as ``get_versioned``."""
        self._request("get_versioned", key)
        return self.inner.get_versioned(key)

    def put(self, key: str, data: BytesLike) -> None:
        """``inner.put``, counted as ``put``."""
        self._request("put", key)
        self.inner.put(key, data)

    def put_if_match(self, key: str, data: BytesLike, version: Version) -> Version | None:
        """``inner.put_if_match``, counted as ``swap``."""
        self._request("swap", key)
        return self.inner.put_if_match(key, data, version)

    def delete(self, key: str) -> None:
        """``inner.delete``, counted as ``delete``."""
        self._request("delete", key)
        self.inner.delete(key)

    def list(self, prefix: str = "", *, start_after: str | None = None) -> Iterator[str]:
        """``inner.list``, counted and delayed as one ``list_page`` per ``page_size`` keys.

        The first page is counted when iteration starts; the next one only when a key past
        the previous page is asked for, as a paged listing fetches them. ``start_after`` is
        passed on when given; pages are counted from there, as a store that declares
        ``Capability.LIST_START_AFTER`` bills them (the inner mailbox must accept it).
        """
        inner = self.inner
        if start_after is not None and isinstance(inner, SupportsListStartAfter):
            keys = inner.list(prefix, start_after=start_after)
        else:
            keys = inner.list(prefix)  # the prefix is checked here, before any request
        return self._paged(prefix, keys)

    def _paged(self, prefix: str, keys: Iterator[str]) -> Iterator[str]:
        self._request("list_page", prefix)
        page = list(itertools.islice(keys, self.page_size))
        while page:
            yield from page
            if len(page) < self.page_size:
                return
            page = list(itertools.islice(keys, self.page_size))  # the next page, if any
            if page:
                self._request("list_page", prefix)


def _check_protocol(box: LatencyMailbox) -> Mailbox:
    return box  # mypy checks that the wrapper satisfies the protocol without a cast
