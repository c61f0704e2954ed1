"""The exchange thread, and what passes between it and the training loop, under one lock.

The training loop hands over a *job*: a snapshot of its model to apply (or ``None``: only
mark it gone), whether it is leaving, and what the snapshot's progress covers. The thread
applies it through the :class:`~gradientmail._exchange.applier.Applier` and hands back the
shared version to adopt, or its error.

**Adopting fresh.** A version handed back waits for the loop's next step, meanwhile others
apply theirs; the loop would then train on a version missing them. So the thread, just
before the loop's next step is due (:attr:`Handoff.next_step_at`, from the loop's measured
pace, less the time a read takes), reads the head again and, if it moved, hands back the
newer version instead, unless the loop took the first already. Every later version holds
this learner's delta (versions only grow from one another), so adopting it loses nothing;
it costs one GET of the head and, when it moved, one read of the version.

The counters of ``Exchange.stats`` live in :attr:`Handoff.tally`,
which changes under the same lock: an exchange is counted in the critical section that
hands its result over, so a loop pacing itself on ``stats.exchanges`` always finds the
counted exchange adoptable.
"""

from __future__ import annotations

import logging
import threading
import time

from gradientmail._errors import GradientMailError, InvalidDataError, LeaseLostError
from gradientmail._exchange.applier import Applier, Outcome
from gradientmail._exchange.pace import Progress
from gradientmail._exchange.stats import Tally
from gradientmail._exchange.tensors import State, corrected
from gradientmail.patterns._workers import CarriedError

log = logging.getLogger("gradientmail.exchange")

#: The first guess of how long reading the head and a version takes, before it is measured.
FIRST_LEAD_S = 0.005

__all__ = ["Handoff"]


class Handoff:
    """One learner's exchange thread and its mailbox slots; every method but :meth:`close`
    is called with :attr:`lock` held (``with handoff.lock:``)."""

    def __init__(self, applier: Applier, closing: threading.Event) -> None:
        self.applier = applier
        #: Set on closing: a request riding out an outage then gives up at once.
        self.closing = closing
        self.tally: Tally = applier.tally
        self.lock = self.tally.lock
        self._job: tuple[State | None, bool, Progress] | None = None
        #: When the training loop's next step is expected (``time.monotonic``), set by it.
        self.next_step_at = 0.0
        self._lead = FIRST_LEAD_S
        self._busy = False  # from taking a job until its result, and any fresher one, is out
        self._result: Outcome | None = None
        self.error: BaseException | None = None
        self._stop = False
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the exchange thread (once the learner joined)."""
        name = f"gradientmail-exchange-{self.applier.learner_id}"
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, snapshot: State | None, leaving: bool, progress: Progress) -> None:
        """Hand the thread a job: apply ``snapshot`` (``None``: nothing, only leave)."""
        self._job = (snapshot, leaving, progress)
        self.lock.notify_all()

    def take(self) -> Outcome | None:
        """The finished exchange's outcome, once; ``None`` while none is finished."""
        result, self._result = self._result, None
        return result

    def wait(self) -> None:
        """Wait until the job handed over has an outcome or the thread failed."""
        while self._result is None and self.error is None:
            self.lock.wait()

    def raise_failure(self) -> None:
        """Raise the thread's error in the training loop, if it failed: a fencing and a
        damaged record by their own types, anything else carried with its traceback."""
        error = self.error
        if error is None:
            return
        learner = self.applier.learner_id
        if isinstance(error, LeaseLostError):
            raise LeaseLostError(str(error), learner=learner) from error
        if isinstance(error, InvalidDataError):  # a damaged record: by its own type too
            raise InvalidDataError(f"the exchange of learner {learner}: {error}") from error
        CarriedError.of(error).reraise(f"the exchange of learner {learner}")

    def settled(self) -> bool:
        """Whether the thread is idle: no job in flight, no fresher version being read."""
        return self._job is None and not self._busy

    def close(self) -> None:
        """Stop the thread once its current job is done, and wait for it (lock not held)."""
        self.closing.set()
        with self.lock:
            self._stop = True
            self.lock.notify_all()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        while True:
            with self.lock:
                while self._job is None and not self._stop:
                    self.lock.wait()
                if self._job is None:
                    return
                snapshot, leaving, progress = self._job
                self._job = None
                self._busy = True
                blocked = self.tally.blocked()
            try:
                if snapshot is None:
                    outcome = self.applier.leave()
                else:
                    outcome = self.applier.apply(snapshot, leaving, blocked, progress)
                    outcome = outcome._replace(correction=corrected(outcome.shared, snapshot))
            except BaseException as exc:  # noqa: BLE001 - carried to the training loop
                self._fail(exc)
                return
            with self.lock:
                # One publication: stats never count an exchange that the next step()
                # cannot adopt yet (a loop pacing itself on stats.exchanges relies on it).
                if outcome.tau is not None:
                    self.tally.exchanged(
                        version=outcome.version, tau=outcome.tau, applied=outcome.applied
                    )
                self._result = outcome
                self.lock.notify_all()
            if snapshot is not None and not leaving:
                try:
                    self._refresh(outcome, snapshot)
                except BaseException as exc:  # noqa: BLE001 - else the next job would never run
                    self._fail(exc)
                    return
            with self.lock:
                self._busy = False
                self.lock.notify_all()

    def _fail(self, exc: BaseException) -> None:
        """End the thread with ``exc``: the training loop raises it at its next step, and a
        wait for an outcome ends."""
        with self.lock:
            self.error = exc
            self._busy = False
            self.lock.notify_all()

    def _refresh(self, outcome: Outcome, snapshot: State) -> None:
        """Hand back a newer version than ``outcome``'s if the loop has not taken it by the
        time its next step is due (less the time a read takes)."""
        with self.lock:
            while True:
                if self._result is not outcome or self._job is not None or self._stop:
                    return
                wait = self.next_step_at - self._lead - time.monotonic()
                if wait <= 0:
                    break
                self.lock.wait(wait)
        began = time.monotonic()
        try:
            fresh = self.applier.refresh(outcome.version)
        except GradientMailError as exc:  # the next exchange meets the store on its own
            log.debug("%s could not read a newer version: %s", self.applier.learner_id, exc)
            return
        took = time.monotonic() - began
        self._lead += 0.2 * (2 * took + 0.001 - self._lead)
        if fresh is None:
            return
        shared, version = fresh
        newer = outcome._replace(
            shared=shared, version=version, correction=corrected(shared, snapshot)
        )
        with self.lock:
            if self._result is outcome:
                self.applier.adopted(shared, version)
                self.tally.adopted(version)
                self._result = newer
