"""``Session``: one learner's part of a run, with its progress published to the mailbox.

::

    session = Session(box, "node-0")
    with session, shared_queue(units, mailbox=box, learner_id="node-0", load=load) as batches:
        for batch in batches:
            train(batch)
            session.step(samples=len(batch))

Guarantees
    * Entering writes ``learners/{learner_id}`` (``running``) before it returns.
    * :meth:`Session.step` makes no store call (two counters, well under a microsecond); a
      background thread publishes every ``publish_every`` seconds (default 5), only when
      something changed: one small write per period whatever the step rate.
    * A ``shared_queue`` entered in the same thread with the same ``learner_id`` reports
      its units to this session (or pass ``session=``): claim, start and finish times, which
      ``gradientmail status --plot`` draws as a Gantt chart.
    * Leaving publishes ``finished``, or ``failed`` with the error's type; the publisher
      thread has ended when ``__exit__`` returns.
    * A learner refused by the run (``RunMismatchError`` before any step) leaves no trace:
      the record it found is put back, or its own removed; the run's status is unchanged.
    * A failing publish never interrupts training: kept in :attr:`Session.publish_error`,
      logged as a WARNING, retried next period; a failing final publish raises, unless
      the block is already raising.
    * ``data_wait_s`` is the time the loop waited for data ("data wait %" in ``status``),
      from a reporting queue or :meth:`Session.timed` (a DataLoader with workers).

The record is JSON; its fields are described in :mod:`gradientmail.status`.
"""

from __future__ import annotations

import logging
import threading
import time
import warnings
from collections.abc import Iterable, Iterator
from types import TracebackType
from typing import Any, TypeVar

from gradientmail._errors import (
    BackendError,
    ConfigurationError,
    KeyNotFoundError,
    RunMismatchError,
)
from gradientmail._keys import validate_segment
from gradientmail._record_codec import decode_record, encode_record
from gradientmail._session_parts import Found, Lifecycle, Publication, Rate, UnitLog
from gradientmail.backends._options import positive, redact
from gradientmail.mailbox import Mailbox
from gradientmail.patterns._progress import (
    active_queues,
    active_reporter,
    pop_reporter,
    push_reporter,
)
from gradientmail.patterns._run_layout import LEARNERS_PREFIX
from gradientmail.patterns._workers import Worker

__all__ = ["LEARNERS_PREFIX", "Session", "active_session"]

_log = logging.getLogger(__name__)

T = TypeVar("T")


def active_session(learner_id: str) -> Session | None:
    """The innermost :class:`Session` for ``learner_id`` entered in this thread, if any."""
    reporter = active_reporter(learner_id)
    return reporter if isinstance(reporter, Session) else None


class Session:
    """A learner's part of a run: registration, cheap step counting, periodic progress.

    Args:
        mailbox: the run's mailbox.
        learner_id: this learner's name (one key segment), as given to ``shared_queue``.
        publish_every: seconds between progress publications (default 5).

    Attributes:
        steps: steps counted by :meth:`step`.
        samples: samples counted by :meth:`step`.
        publish_error: the last error a periodic publish raised, or ``None``.
        data_wait_s: seconds the training loop waited for data (see :meth:`timed`).
    """

    def __init__(self, mailbox: Mailbox, learner_id: str, *, publish_every: float = 5.0) -> None:
        self.mailbox = mailbox
        self.learner_id = validate_segment(learner_id, "learner id")
        self._publication = Publication(float(positive(publish_every, "publish_every (seconds)")))
        self.steps = 0
        self.samples = 0
        self.data_wait_s = 0.0
        self._timing = False  # inside timed(): its own measurement includes the queue's wait
        self._units = UnitLog()
        self._life = Lifecycle()
        self._found = Found()
        self._rate = Rate()
        self._publisher = Worker(f"gradientmail-session-{self.learner_id}", self._publish_every)

    @property
    def publish_every(self) -> float:
        """Seconds between progress publications."""
        return self._publication.every

    @property
    def publish_error(self) -> BaseException | None:
        """The last error a periodic publish raised, or ``None`` once one succeeded again."""
        return self._publication.error

    @property
    def key(self) -> str:
        """This learner's record: ``learners/{learner_id}``."""
        return LEARNERS_PREFIX + self.learner_id

    # -- the hot path -------------------------------------------------------------------------

    def step(self, samples: int = 0) -> None:
        """Count one training step of ``samples`` samples. No store call, no lock."""
        self.steps += 1
        self.samples += samples

    def data_waited(self, seconds: float) -> None:
        """Add ``seconds`` the consumer waited for data (called by ``shared_queue``).

        Ignored while :meth:`timed` is measuring the same loop, whose figure includes it.
        """
        if not self._timing:
            self.data_wait_s += seconds

    def timed(self, batches: Iterable[T]) -> Iterator[T]:
        """Yield ``batches``' items, adding the time spent waiting for each to the data wait.

        For a DataLoader with workers, whose queues run in the worker processes: the time
        this loop waits for the next batch is what leaves the GPU idle::

            for batch in session.timed(loader):
                train(batch)

        Costs two clock reads per item. The wait for the end of the iteration counts too.
        """
        iterator = iter(batches)
        while True:
            self._timing = True
            began = time.perf_counter()
            try:
                item = next(iterator)
            except StopIteration:
                return
            finally:
                self.data_wait_s += time.perf_counter() - began
                self._timing = False
            yield item

    # -- reports from shared_queue (ProgressReporter) ---------------------------------------

    def unit_claimed(self, identifier: str, reclaimed: bool = False, epoch: int = 0) -> None:
        """Record that this learner claimed ``identifier`` of ``epoch`` (called by
        ``shared_queue``).

        ``reclaimed`` marks a unit taken over from a learner that died or left.
        """
        self._units.claimed((epoch, identifier), reclaimed)

    def unit_released(self, identifier: str, epoch: int = 0) -> None:
        """Record that this learner gave ``identifier`` back unfinished (it left early)."""
        self._units.released((epoch, identifier))

    def unit_started(self, identifier: str, epoch: int = 0) -> None:
        """Record that the unit's first item reached the training loop."""
        self._units.started((epoch, identifier))

    def unit_finished(self, identifier: str, items: int, epoch: int = 0) -> None:
        """Record that the training loop took every item of the unit."""
        self._units.done((epoch, identifier), items)

    @property
    def units_claimed(self) -> int:
        """Units this learner claimed."""
        return len(self._units)

    @property
    def units_finished(self) -> int:
        """Units whose every item the training loop took."""
        return self._units.finished

    # -- publishing ---------------------------------------------------------------------------

    def record(self) -> dict[str, Any]:
        """The progress record as published (see :mod:`gradientmail.status`)."""
        samples = self.samples
        rate = self._rate.update(samples, self._life.started_at)
        units, finished = self._units.rows()
        return {
            "learner": self.learner_id,
            "state": self._life.state,
            "error": self._life.error,
            "started_at": self._life.started_at,
            "updated_at": time.time(),
            "finished_at": self._life.finished_at,
            "steps": self.steps,
            "samples": samples,
            "rate": rate,
            "units_claimed": len(units),
            "units_finished": finished,
            "units": [row.encode() for row in units],
            "publish_every": self.publish_every,
            "data_wait_s": self.data_wait_s,
        }

    def publish(self) -> None:
        """Write the progress record now (one ``put``). Raises the store's error."""
        body = self.record()
        self.mailbox.put(self.key, encode_record(body))
        self._publication.last = (
            body["steps"],
            body["samples"],
            body["units_claimed"],
            body["units_finished"],
            body["state"],
            body["data_wait_s"],
        )

    def _changed(self) -> bool:
        current = (
            self.steps,
            self.samples,
            len(self._units),
            self._units.finished,
            self._life.state,
            self.data_wait_s,
        )
        return current != self._publication.last

    def _publish_every(self, stop: threading.Event) -> None:
        while not stop.wait(self.publish_every):
            if not self._changed():
                continue
            try:
                self.publish()
                self._publication.error = None
            except BackendError as exc:
                # Training goes on; the next period retries. Warn once per failing streak.
                level = logging.DEBUG if self._publication.error is not None else logging.WARNING
                self._publication.error = exc
                _log.log(
                    level,
                    "learner %r could not publish its progress to %s (the next period "
                    "retries; training goes on): %s",
                    self.learner_id,
                    redact(self.mailbox.url),
                    exc,
                )

    # -- context manager ----------------------------------------------------------------------

    def __enter__(self) -> Session:
        if self._life.state != "new":
            raise ConfigurationError(
                f"session {self.learner_id!r} was already entered; use one Session per run"
            )
        self._warn_if_queue_runs()
        self._resume()
        self._found.entered = self._counters()
        self._life.started_at = time.time()
        self._rate.start(self.samples)
        self._life.state = "running"
        self.publish()
        push_reporter(self)
        self._publisher.start()
        return self

    def _warn_if_queue_runs(self) -> None:
        queues = active_queues()
        if queues:
            warnings.warn(
                f"Session {self.learner_id!r} was entered while a shared_queue for "
                f"{queues[-1]!r} already runs in this thread: that queue does not report to "
                "this session, so its units are not recorded; enter the Session first "
                "(with session, shared_queue(...) as batches:) with the same learner id",
                RuntimeWarning,
                stacklevel=3,
            )

    def _resume(self) -> None:
        """Carry on from this learner's earlier record (a restart with the same id).

        Its finished units, steps and samples are kept, so a restart never makes the run's
        progress go backwards. Unfinished units of the earlier incarnation are dropped: the
        queue takes them back and reports them again.
        """
        try:
            self._found.record = self.mailbox.get(self.key)
        except KeyNotFoundError:
            self._found.record = None
        except BackendError:
            return
        self._found.read = True
        prior = None if self._found.record is None else decode_record(self._found.record)
        if not prior:
            return
        self._units.restore(prior.get("units"))
        for name in ("steps", "samples"):
            value = prior.get(name)
            if isinstance(value, int) and value > 0:
                setattr(self, name, getattr(self, name) + value)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        pop_reporter(self)
        self._publisher.stop()
        self._life.finished_at = time.time()
        refused = exc_type is not None and issubclass(exc_type, RunMismatchError)
        if refused and self._found.read and self._counters() == self._found.entered:
            self._put_back()  # nothing happened in this session: no step, sample or unit
            return
        if exc_type is None:
            self._life.state = "finished"
        else:
            self._life.state = "failed"
            name = exc_type.__qualname__
            if exc_type.__module__ not in ("builtins", "__main__"):
                name = f"{exc_type.__module__}.{name}"
            self._life.error = name
        try:
            self.publish()
        except BackendError as error:
            if exc_type is None:
                raise
            _log.warning(
                "learner %r could not publish its final state (%s) to %s: %s",
                self.learner_id,
                self._life.state,
                redact(self.mailbox.url),
                error,
            )

    def _counters(self) -> tuple[int, int, int, int]:
        return (self.steps, self.samples, self._units.finished, len(self._units))

    def _put_back(self) -> None:
        """Restore the record this session found (none: remove its own), as if never entered.

        For a learner the run refused (:class:`RunMismatchError`): it took no part in that
        run, so a finished learner of the same id stays finished in ``gradientmail status``.
        """
        try:
            if self._found.record is None:
                self.mailbox.delete(self.key)
            else:
                self.mailbox.put(self.key, self._found.record)
        except BackendError as error:
            _log.warning(
                "learner %r, refused by the run, could not restore its earlier record at %s: %s",
                self.learner_id,
                redact(self.mailbox.url),
                error,
            )

    def __repr__(self) -> str:
        return (
            f"<Session learner={self.learner_id!r} state={self._life.state} steps={self.steps} "
            f"samples={self.samples} mailbox={self.mailbox.url!r}>"
        )
