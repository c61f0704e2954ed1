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
page of ``page_size`` keys, as S3, GCS and Azure bill it; an empty listing is one page. The
counting is the library's own door (the one ``queue.stats.cost`` is a view of), so the
counts also hold the bytes sent and received and the keys listed
(:meth:`RequestCounts.measured`).

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

import math
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from gradientmail._counting import Counting, RequestCounts, key_group
from gradientmail._errors import ConfigurationError
from gradientmail.mailbox import Mailbox

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


class LatencyMailbox(Counting):
    """A :class:`~gradientmail.Mailbox` that delays and counts each request to ``inner``.

    The counting door (``gradientmail``'s own, the one the patterns count their requests
    with) that also waits one latency drawn from ``latency`` before each request (each
    page of a listing waits too). Results and errors are ``inner``'s own; capabilities,
    URL and key limit are passed through, so code under test behaves as it would on
    ``inner``. A pickled wrapper reopens ``inner`` as ``inner``'s own pickle does, with
    fresh counts.

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
        super().__init__(inner, group=group, page_size=page_size)
        self.latency = latency
        self._sleep = sleep
        self._seed = seed
        self._rng = random.Random(seed)
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, object]:
        state = super().__getstate__()
        del state["_lock"], state["_rng"]
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        super().__setstate__(state)
        self._rng = random.Random(self._seed)
        self._lock = threading.Lock()

    def _sending(self, operation: str) -> None:
        """Wait one latency per request (drawn under the lock, waited outside it)."""
        with self._lock:
            wait = self.latency.draw(self._rng)
        if wait > 0:
            self._sleep(wait)

    def reset_counts(self) -> RequestCounts:
        """Return the counts so far and start counting from zero."""
        return self.tally.reset()


def _check_protocol(box: LatencyMailbox) -> Mailbox:
    return box  # mypy checks that the wrapper satisfies the protocol without a cast
