"""Riding out a store that fails for a while: one mailbox that retries until a deadline.

A mailbox retries a transient failure a few times within a second (its retry policy). A
brownout of an object store, a throttled prefix or a restarting gateway lasts longer than
that, and a learner that gave up then would die with its units half done. :class:`Patient`
wraps the mailbox that a pattern's background thread uses and keeps retrying each call
that failed with :class:`~gradientmail.TransientBackendError`, for up to ``patience``
seconds from the call's first failure, each pause as long as the outage so far (from
0.1 s up to 2 s).

Retrying is safe for every call: a read or a listing changes nothing; ``put`` and
``delete`` give the same result twice; and a conditional write raises
``TransientBackendError`` only when no attempt was carried out (an ambiguous one is read back
by the mailbox, and raises :class:`~gradientmail.OutcomeUnknownError`, which this does not
retry). A listing that fails part-way resumes after the last key it yielded.

The first failure of a call is logged at WARNING (the key, the error and how long this
will keep trying), the recovery at INFO, and giving up at WARNING; the last error is then
raised as it was. Nothing else is retried: a missing key, a refused credential and a
precondition failure are answers, not outages.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

from gradientmail._errors import TransientBackendError
from gradientmail._forwarding import Forwarding, list_after, takes_start_after
from gradientmail.mailbox import BytesLike, Mailbox, Version

__all__ = ["DEFAULT_PATIENCE_S", "Patient"]

_log = logging.getLogger(__name__)

R = TypeVar("R")

#: How long a pattern rides out an outage unless told otherwise: a shared queue's default
#: lease (a queue waits for its own lease), and an Exchange's default ``patience``.
DEFAULT_PATIENCE_S = 60.0

#: The first pause after a failed call; each later one lasts as long as the outage so far,
#: up to :data:`MAX_PAUSE_S`.
FIRST_PAUSE_S = 0.1
MAX_PAUSE_S = 2.0


class Patient(Forwarding):
    """A :class:`~gradientmail.Mailbox` that retries transient failures for ``patience`` s.

    Args:
        inner: the mailbox to call.
        patience: the longest a call keeps retrying, in seconds from its first failure.
        stop: once set, a failing call stops waiting and raises its error at once (the
            pattern is closing).
        what: who waits, for the log (``"shared_queue learner 'node-0'"``).
    """

    def __init__(self, inner: Mailbox, patience: float, stop: threading.Event, what: str) -> None:
        self.inner = inner
        self.patience = patience
        self._stop = stop
        self._what = what
        self._start_after = takes_start_after(inner)

    # -- calls, retried -------------------------------------------------------------------------

    def put_if_absent(self, key: str, data: BytesLike) -> bool:
        return self._call(key, lambda: self.inner.put_if_absent(key, data))

    def get(self, key: str) -> bytes:
        return self._call(key, lambda: self.inner.get(key))

    def put(self, key: str, data: BytesLike) -> None:
        self._call(key, lambda: self.inner.put(key, data))

    def delete(self, key: str) -> None:
        self._call(key, lambda: self.inner.delete(key))

    def get_versioned(self, key: str) -> tuple[bytes, Version]:
        return self._call(key, lambda: self.inner.get_versioned(key))

    def put_if_match(self, key: str, data: BytesLike, version: Version) -> Version | None:
        return self._call(key, lambda: self.inner.put_if_match(key, data, version))

    def list(self, prefix: str = "", *, start_after: str | None = None) -> Iterator[str]:
        """The inner listing; one that fails part-way resumes after the last key yielded."""
        last = start_after
        began: float | None = None
        while True:
            try:
                for key in self._listing(prefix, last):
                    if began is not None:
                        self._recovered(prefix, began)
                        began = None
                    last = key
                    yield key
                if began is not None:
                    self._recovered(prefix, began)
                return
            except TransientBackendError as exc:
                began = self._wait(prefix, exc, began)

    def _listing(self, prefix: str, after: str | None) -> Iterator[str]:
        return list_after(self.inner, prefix, after, self._start_after)

    # -- the waiting ----------------------------------------------------------------------------

    def _call(self, key: str, attempt: Callable[[], R]) -> R:
        began: float | None = None
        while True:
            try:
                result = attempt()
            except TransientBackendError as exc:
                began = self._wait(key, exc, began)
                continue
            if began is not None:
                self._recovered(key, began)
            return result

    def _wait(self, key: str, exc: TransientBackendError, began: float | None) -> float:
        """Pause before the next try, or re-raise ``exc`` once patience ran out."""
        now = time.monotonic()
        if began is None:
            began = now
            _log.warning(
                "%s: the store failed on %r (%s); retrying for up to %.0f s",
                self._what,
                key,
                exc,
                self.patience,
            )
        waited = now - began
        if waited >= self.patience or self._stop.is_set():
            _log.warning(
                "%s: the store still fails on %r after %.1f s; giving up: %s",
                self._what,
                key,
                waited,
                exc,
            )
            raise exc
        # Each pause as long as the outage so far: the tries thin out geometrically.
        pause = min(MAX_PAUSE_S, max(FIRST_PAUSE_S, waited), self.patience - waited)
        self._stop.wait(pause)  # a backoff between tries, not a synchronisation
        return began

    def _recovered(self, key: str, began: float) -> None:
        _log.info(
            "%s: the store answered on %r again after %.1f s",
            self._what,
            key,
            time.monotonic() - began,
        )
