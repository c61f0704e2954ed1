"""A producer over a mailbox: numbered items, backpressure by claims, a lease, an end.

* Registration: ``producers/{id}/registered`` is created once, so a second registration of
  one id (in any process) is refused.
* Items: item ``n`` is created at ``items/{id}/{n}``; before writing it, the producer waits
  until ``claims/{id}/{n - share}`` exists (claims of one producer form a prefix, so that
  one read proves at most ``share`` of its items are unclaimed).
* Lease: the producer holds a :class:`~gradientmail.patterns._leases.Lease` at
  ``leases/producers/{id}``, renewed every ``heartbeat_interval`` by a background thread.
  Consumers watch it and declare a producer lost once it was unchanged for ``lease``
  seconds. Before each item ``put`` checks the lease (:meth:`Lease.ensure_fresh`: free
  while the last renewal is recent), so a producer that was declared lost, or was paused
  past its lease, stops with ``PipelineAbortedError`` instead of adding items that no longer
  count. ``put`` also reads the ``aborted`` record once per ``heartbeat_interval``.
* End: ``producers/{id}/end`` is created once with the final count, by ``done``/``fail``,
  or by a consumer that declared the producer lost; whoever creates it first decides.
"""

from __future__ import annotations

import os
import socket
import time
from typing import TYPE_CHECKING

from gradientmail._errors import (
    LeaseLostError,
    PipelineAbortedError,
    PipelineError,
    PipelineStalledError,
    ProducerRegistrationError,
)
from gradientmail.backends._base import as_bytes
from gradientmail.patterns._claims import create_settled, new_token
from gradientmail.patterns._workers import Backoff, CarriedError
from gradientmail.patterns.pipeline._records import (
    End,
    EndStatus,
    Registration,
    claim_key,
    end_key,
    exists,
    item_key,
    producer_lease_key,
    registered_key,
)
from gradientmail.patterns.pipeline._roles import Producer
from gradientmail.patterns.pipeline._stats import ProducerStats

if TYPE_CHECKING:
    from gradientmail.patterns.pipeline._mailbox_run import MailboxRun

__all__ = ["MailboxProducer"]


def _declared_by(end: End | None) -> str:
    if end is None:
        return "declared ended by another process"
    return f"declared {end.status} by {end.by}"


class MailboxProducer(Producer[bytes]):
    """A registered producer of one mailbox run (see the module docstring)."""

    def __init__(self, core: MailboxRun, producer_id: str) -> None:
        super().__init__(producer_id, ProducerStats())
        self._core = core
        self._box = core.mailbox
        self._token = new_token()
        self._seq = 0
        self._claimed = 0  # a lower bound on how many of our items are claimed
        self._stopped: str | None = None  # why put() refuses: fenced or aborted
        self._aborted_checked = time.monotonic()
        key = registered_key(producer_id)
        registration = Registration(socket.gethostname(), os.getpid(), self._token).to_bytes()
        box = core.starting(f"pipeline producer {producer_id!r}")
        if not create_settled(box, key, registration, lambda stored: stored == registration):
            other = Registration.read(box, key)
            by = "" if other is None else f" by {other.host} (pid {other.pid})"
            raise ProducerRegistrationError(
                f"producer {producer_id!r} has already registered in {self._box.url}{by}; "
                "each declared id registers once per run"
            )
        self._lease = core.lease(producer_lease_key(producer_id), producer_id)
        # A fresh key (registration already made this id unique); an outage is waited out.
        self._lease.acquire(patience=core.settings.lease)
        self._lease.start()
        self._lease_ended = False

    # -- the lease and the abort record ---------------------------------------------------

    def _raise_if_stopped(self) -> None:
        """Raise ``PipelineAbortedError`` if this producer was fenced or the run aborted."""
        if self._stopped is None:
            try:
                self._lease.ensure_fresh()
            except LeaseLostError as exc:
                self._stop(self._fenced(exc), "failed")
                raise PipelineAbortedError(self._stopped) from exc
            now = time.monotonic()
            if now - self._aborted_checked >= self._core.settings.heartbeat_interval:
                self._aborted_checked = now
                aborted = self._core.aborted()
                if aborted is not None:
                    self._stop(f"the pipeline was aborted: {aborted.reason}", "failed")
        if self._stopped is not None:
            raise PipelineAbortedError(self._stopped)

    def _fenced(self, exc: LeaseLostError) -> str:
        end = End.read(self._box, end_key(self.id))
        how = "declared lost" if end is None else _declared_by(end)
        after = "" if end is None else f"; items from #{end.count} on are discarded"
        return (
            f"producer {self.id!r} was {how}: its lease was not renewed for "
            f"over {self._core.settings.lease}s ({exc}){after}"
        )

    def _stop(self, why: str, state: str) -> None:
        """Refuse further items, and stop renewing the lease (recording ``state``)."""
        self._stopped = why
        self._end_lease(state)

    def _end_lease(self, state: str) -> None:
        if not self._lease_ended:
            self._lease_ended = True
            self._lease.end(state)

    # -- items --------------------------------------------------------------------------

    def put(self, item: bytes) -> None:
        self._check_open()
        body = as_bytes(item)
        self._raise_if_stopped()
        if self._seq - self._claimed >= self._core.share:
            self._wait_for_room()
        key = item_key(self.id, self._seq)
        if not create_settled(self._box, key, body, lambda stored: stored == body):
            raise PipelineError(
                f"{key!r} already exists: another process is writing as producer {self.id!r}, "
                "or the mailbox holds an earlier run; use a new namespace per run"
            )
        self._seq += 1
        self.stats.items += 1

    def _wait_for_room(self) -> None:
        core = self._core
        start = time.perf_counter()
        stall = core.settings.stall_timeout
        backoff = Backoff(core.settings.poll_interval)
        try:
            while True:
                needed = self._seq - core.share  # claims form a prefix: this one suffices
                if exists(self._box, claim_key(self.id, needed)):
                    self._claimed = needed + 1
                    return
                self._raise_if_stopped()
                waited = time.perf_counter() - start
                if stall is not None and waited > stall:
                    raise PipelineStalledError(
                        f"producer {self.id!r} waited {waited:.1f}s for room: its item "
                        f"#{needed} is still unclaimed and {core.share} item(s) are ahead of "
                        "the consumers (are the consumers running?)"
                    )
                time.sleep(backoff.next())
        finally:
            self.stats.blocked_s += time.perf_counter() - start

    # -- the end ------------------------------------------------------------------------

    def _finish(self, status: EndStatus, error: CarriedError | None = None) -> None:
        self._finished = True
        end = End(status, count=self._seq, by=self.id, token=self._token, error=error).to_bytes()
        try:
            stored = create_settled(self._box, end_key(self.id), end, lambda found: found == end)
        finally:
            self._end_lease("finished" if status == "done" else "failed")
        if not stored:
            other = End.read(self._box, end_key(self.id))
            after = "" if other is None else f" after {other.count} item(s)"
            raise PipelineAbortedError(
                f"producer {self.id!r} was already {_declared_by(other)}{after}; its later "
                "items are discarded"
            )

    def done(self) -> None:
        if self._finished:
            return
        self._finish("done")

    def fail(self, error: BaseException) -> None:
        if self._finished:
            return
        self._finish("failed", CarriedError.of(error))
