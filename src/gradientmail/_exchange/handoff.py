"""The exchange thread, and what passes between it and the training loop, under one lock.

The training loop hands over a *job*: a snapshot of its model to apply (or ``None``: only
mark it gone), and whether it is leaving. The thread applies it through the
:class:`~gradientmail._exchange.applier.Applier` and hands back the shared version to
adopt, or its error. The counters of ``Exchange.stats`` live in :attr:`Handoff.tally`,
which changes under the same lock: an exchange is counted in the critical section that
hands its result over, so a loop pacing itself on ``stats.exchanges`` always finds the
counted exchange adoptable.
"""

from __future__ import annotations

import threading

from gradientmail._exchange.applier import Applier, Outcome
from gradientmail._exchange.stats import Tally
from gradientmail._exchange.tensors import State

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
        self._job: tuple[State | None, bool] | None = None  # (snapshot, leaving)
        self._result: Outcome | None = None
        self.error: BaseException | None = None
        self._stop = False
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the exchange thread (once the learner joined)."""
        name = f"gradientmail-exchange-{self.applier.learner_id}"
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, snapshot: State | None, leaving: bool) -> None:
        """Hand the thread a job: apply ``snapshot`` (``None``: nothing, only leave)."""
        self._job = (snapshot, leaving)
        self.lock.notify_all()

    def take(self) -> Outcome | None:
        """The finished exchange's outcome, once; ``None`` while none is finished."""
        result, self._result = self._result, None
        return result

    def wait(self) -> None:
        """Wait until the job handed over has an outcome or the thread failed."""
        while self._result is None and self.error is None:
            self.lock.wait()

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
                snapshot, leaving = self._job
                self._job = None
                blocked = self.tally.blocked()
            try:
                if snapshot is None:
                    outcome = self.applier.leave()
                else:
                    outcome = self.applier.apply(snapshot, leaving, blocked)
            except BaseException as exc:  # noqa: BLE001 - carried to the training loop
                with self.lock:
                    self.error = exc
                    self.lock.notify_all()
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
