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
from gradientmail.backends._options import positive, redact
from gradientmail.mailbox import Mailbox
from gradientmail.patterns._claims import decode_record, encode_record
from gradientmail.patterns._progress import (
    active_queues,
    active_reporter,
    pop_reporter,
    push_reporter,
)
from gradientmail.patterns._run_layout import LEARNERS_PREFIX

__all__ = ["LEARNERS_PREFIX", "Session", "active_session"]

#: Weight of the newest period in the smoothed samples-per-second rate.
RATE_SMOOTHING = 0.5

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
        self.publish_every = float(positive(publish_every, "publish_every (seconds)"))
        self.key = LEARNERS_PREFIX + self.learner_id
        self.steps = 0
        self.samples = 0
        self.publish_error: BaseException | None = None
        self.data_wait_s = 0.0
        self._timing = False  # inside timed(): its own measurement includes the queue's wait
        self._lock = threading.Lock()  # guards units and the published snapshot
        # id → [claimed, started, finished, items, reclaimed]
        self._units: dict[str, list[Any]] = {}
        #: The record found at ``learners/{id}`` on entering (``None``: none), and whether
        #: it could be read at all; and the counters on entering.
        self._found: bytes | None = None
        self._found_read = False
        self._entered: tuple[int, int, int, int] = (0, 0, 0, 0)
        self._units_finished = 0
        self._state = "new"
        self._error: str | None = None
        self._started_at = 0.0
        self._finished_at: float | None = None
        self._rate = 0.0
        self._rate_mark: tuple[float, int] | None = None  # (monotonic, samples) at last publish
        self._last_published: tuple[int, int, int, int, str, float] | None = None
        self._stop = threading.Event()
        self._publisher: threading.Thread | None = None

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

    def unit_claimed(self, identifier: str, reclaimed: bool = False) -> None:
        """Record that this learner claimed ``identifier`` (called by ``shared_queue``).

        ``reclaimed`` marks a unit taken over from a learner that died or left.
        """
        with self._lock:
            self._units[identifier] = [time.time(), None, None, 0, reclaimed]

    def unit_released(self, identifier: str) -> None:
        """Record that this learner gave ``identifier`` back unfinished (it left early)."""
        with self._lock:
            entry = self._units.get(identifier)
            if entry is not None and entry[2] is None:
                del self._units[identifier]

    def unit_started(self, identifier: str) -> None:
        """Record that the unit's first item reached the training loop."""
        with self._lock:
            entry = self._units.setdefault(identifier, [None, None, None, 0, False])
            entry[1] = time.time()

    def unit_finished(self, identifier: str, items: int) -> None:
        """Record that the training loop took every item of the unit."""
        with self._lock:
            entry = self._units.setdefault(identifier, [None, None, None, 0, False])
            if entry[2] is None:
                self._units_finished += 1
            entry[2] = time.time()
            entry[3] = items

    @property
    def units_claimed(self) -> int:
        """Units this learner claimed."""
        return len(self._units)

    @property
    def units_finished(self) -> int:
        """Units whose every item the training loop took."""
        return self._units_finished

    # -- publishing ---------------------------------------------------------------------------

    def record(self) -> dict[str, Any]:
        """The progress record as published (see :mod:`gradientmail.status`)."""
        now = time.monotonic()
        samples = self.samples
        if self._rate_mark is None:
            elapsed = max(time.time() - self._started_at, 1e-9)
            rate = samples / elapsed if self._started_at else 0.0
        else:
            then, before = self._rate_mark
            instant = (samples - before) / max(now - then, 1e-9)
            rate = RATE_SMOOTHING * instant + (1 - RATE_SMOOTHING) * self._rate
        self._rate, self._rate_mark = rate, (now, samples)
        with self._lock:
            units = [[ident, *entry[:3], entry[4]] for ident, entry in self._units.items()]
            finished = self._units_finished
        return {
            "learner": self.learner_id,
            "state": self._state,
            "error": self._error,
            "started_at": self._started_at,
            "updated_at": time.time(),
            "finished_at": self._finished_at,
            "steps": self.steps,
            "samples": samples,
            "rate": rate,
            "units_claimed": len(units),
            "units_finished": finished,
            "units": units,
            "publish_every": self.publish_every,
            "data_wait_s": self.data_wait_s,
        }

    def publish(self) -> None:
        """Write the progress record now (one ``put``). Raises the store's error."""
        body = self.record()
        self.mailbox.put(self.key, encode_record(body))
        self._last_published = (
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
            self._units_finished,
            self._state,
            self.data_wait_s,
        )
        return current != self._last_published

    def _publish_periodically(self) -> None:
        while not self._stop.wait(self.publish_every):
            if not self._changed():
                continue
            try:
                self.publish()
                self.publish_error = None
            except BackendError as exc:
                # Training goes on; the next period retries. Warn once per failing streak.
                level = logging.DEBUG if self.publish_error is not None else logging.WARNING
                self.publish_error = exc
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
        if self._state != "new":
            raise ConfigurationError(
                f"session {self.learner_id!r} was already entered; use one Session per run"
            )
        self._warn_if_queue_runs()
        self._resume()
        self._entered = (self.steps, self.samples, self._units_finished, len(self._units))
        self._started_at = time.time()
        self._rate_mark = (time.monotonic(), self.samples)
        self._state = "running"
        self.publish()
        push_reporter(self)
        self._publisher = threading.Thread(
            target=self._publish_periodically,
            name=f"gradientmail-session-{self.learner_id}",
            daemon=True,
        )
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
            self._found = self.mailbox.get(self.key)
        except KeyNotFoundError:
            self._found = None
        except BackendError:
            return
        self._found_read = True
        prior = None if self._found is None else decode_record(self._found)
        if not prior:
            return
        for entry in prior.get("units") or []:
            if isinstance(entry, list) and len(entry) >= 4 and entry[3] is not None:
                ident, claimed, started, finished = entry[:4]
                reclaimed = bool(entry[4]) if len(entry) > 4 else False
                self._units[str(ident)] = [claimed, started, finished, 0, reclaimed]
                self._units_finished += 1
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
        self._stop.set()
        if self._publisher is not None:
            self._publisher.join()
        self._finished_at = time.time()
        refused = exc_type is not None and issubclass(exc_type, RunMismatchError)
        if refused and self._found_read and self._untouched():
            self._put_back()
            return
        if exc_type is None:
            self._state = "finished"
        else:
            self._state = "failed"
            name = exc_type.__qualname__
            if exc_type.__module__ not in ("builtins", "__main__"):
                name = f"{exc_type.__module__}.{name}"
            self._error = name
        try:
            self.publish()
        except BackendError as error:
            if exc_type is None:
                raise
            _log.warning(
                "learner %r could not publish its final state (%s) to %s: %s",
                self.learner_id,
                self._state,
                redact(self.mailbox.url),
                error,
            )

    def _untouched(self) -> bool:
        """Nothing happened in this session: no step, sample, unit or data wait."""
        return (self.steps, self.samples, self._units_finished, len(self._units)) == self._entered

    def _put_back(self) -> None:
        """Restore the record this session found (none: remove its own), as if never entered.

        For a learner the run refused (:class:`RunMismatchError`): it took no part in that
        run, so a finished learner of the same id stays finished in ``gradientmail status``.
        """
        try:
            if self._found is None:
                self.mailbox.delete(self.key)
            else:
                self.mailbox.put(self.key, self._found)
        except BackendError as error:
            _log.warning(
                "learner %r, refused by the run, could not restore its earlier record at %s: %s",
                self.learner_id,
                redact(self.mailbox.url),
                error,
            )

    def __repr__(self) -> str:
        return (
            f"<Session learner={self.learner_id!r} state={self._state} steps={self.steps} "
            f"samples={self.samples} mailbox={self.mailbox.url!r}>"
        )
