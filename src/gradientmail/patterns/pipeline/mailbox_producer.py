"""A producer over a mailbox: numbered items, backpressure by claims, a heartbeat, an end.

* Registration: ``producers/{id}/registered`` is created once, so a second registration of
  one id (in any process) is refused.
* Items: item ``n`` is created at ``items/{id}/{n}``; before writing it, the producer waits
  until ``claims/{id}/{n - share}`` exists (claims of one producer form a prefix, so that
  one read proves at most ``share`` of its items are unclaimed).
* Heartbeat: a background :class:`~gradientmail.patterns.workers.Worker` rewrites
  ``producers/{id}/heartbeat`` every ``heartbeat_interval`` and watches for being fenced
  (an end record it did not write) or an abort; ``put`` then raises.
* End: ``producers/{id}/end`` is created once with the final count, by ``done``/``fail``,
  or by a consumer that declared the producer lost; whoever creates it first decides.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from typing import TYPE_CHECKING

from gradientmail.backends.base import as_bytes
from gradientmail.errors import (
    GradientMailError,
    PipelineAbortedError,
    PipelineError,
    PipelineStalledError,
    ProducerRegistrationError,
)
from gradientmail.patterns.claims import new_token
from gradientmail.patterns.pipeline.api import Producer
from gradientmail.patterns.pipeline.records import (
    End,
    EndStatus,
    Heartbeat,
    Registration,
    claim_key,
    end_key,
    exists,
    heartbeat_key,
    item_key,
    registered_key,
)
from gradientmail.patterns.pipeline.stats import ProducerStats
from gradientmail.patterns.workers import Backoff, CarriedError, Worker

if TYPE_CHECKING:
    from gradientmail.patterns.pipeline.over_mailbox import MailboxTransport

__all__ = ["MailboxProducer"]


def _declared_by(end: End | None) -> str:
    if end is None:
        return "declared ended by another process"
    return f"declared {end.status} by {end.by}"


class MailboxProducer(Producer[bytes]):
    """A registered producer of one mailbox run (see the module docstring)."""

    def __init__(self, core: MailboxTransport, producer_id: str) -> None:
        super().__init__(producer_id, ProducerStats())
        self._core = core
        self._box = core.mailbox
        self._token = new_token()
        self._seq = 0
        self._claimed = 0  # a lower bound on how many of our items are claimed
        self._stopped: str | None = None  # set by the heartbeat thread: fenced or aborted
        key = registered_key(producer_id)
        registration = Registration(socket.gethostname(), os.getpid(), self._token)
        if not self._box.put_if_absent(key, registration.to_bytes()):
            other = Registration.read(self._box, key)
            by = "" if other is None else f" by {other.host} (pid {other.pid})"
            raise ProducerRegistrationError(
                f"producer {producer_id!r} has already registered in {self._box.url}{by}; "
                "each declared id registers once per run"
            )
        self._beat = 0
        self._send_heartbeat()
        self._heartbeat = Worker(f"gradientmail-heartbeat-{producer_id}", self._heartbeat_loop)
        self._heartbeat.start()

    # -- heartbeat ----------------------------------------------------------------------

    def _send_heartbeat(self) -> None:
        self._beat += 1
        beat = Heartbeat(token=self._token, beat=self._beat, produced=self._seq)
        self._box.put(heartbeat_key(self.id), beat.to_bytes())

    def _heartbeat_loop(self, stop: threading.Event) -> None:
        while not stop.wait(self._core.settings.heartbeat_interval):
            try:
                self._send_heartbeat()
                end = End.read(self._box, end_key(self.id))
                if end is not None and end.token != self._token:
                    self._stopped = (
                        f"producer {self.id!r} was {_declared_by(end)} (its heartbeat was "
                        f"silent for over {self._core.settings.lease}s); items from "
                        f"#{end.count} on are discarded"
                    )
                    return  # fenced: nothing this producer does counts any more
                aborted = self._core.aborted()
                if aborted is not None:
                    self._stopped = f"the pipeline was aborted: {aborted.reason}"
                    return
            except GradientMailError:
                # A store hiccup: the next beat retries. If the store stays unreachable,
                # consumers declare this producer lost and the fence stops it.
                continue

    def _raise_if_stopped(self) -> None:
        if self._stopped is not None:
            raise PipelineAbortedError(self._stopped)

    # -- items --------------------------------------------------------------------------

    def put(self, item: bytes) -> None:
        self._check_open()
        body = as_bytes(item)
        self._raise_if_stopped()
        if self._seq - self._claimed >= self._core.share:
            self._wait_for_room()
        key = item_key(self.id, self._seq)
        if not self._box.put_if_absent(key, body):
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
        end = End(status, count=self._seq, by=self.id, token=self._token, error=error)
        try:
            stored = self._box.put_if_absent(end_key(self.id), end.to_bytes())
        finally:
            self._heartbeat.stop()
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
