"""Recording completions off the training thread, in the order the units finished.

The consumer hands over each unit whose last item it took; a background thread (the
shared :class:`~gradientmail.patterns._in_order.InOrderRecorder`) records it (the claim's
swap to ``done`` and the ``done/`` record) and only then drops it from the learner's
:class:`~gradientmail.patterns.shared_queue._holdings.Holdings`. A failure is
kept as :attr:`CompletionRecorder.error`, for the consumer to raise at its next item; a
wake-up entry in the buffer makes sure a consumer blocked on an empty buffer sees it.

The recorder writes a unit done only once the queue's
:class:`~gradientmail.patterns.shared_queue._completion_gate.CompletionGate` opens for it
(at once, by default), and leaves it held, to be released, when the gate says it never will.
"""

from __future__ import annotations

from collections.abc import Callable

from gradientmail._errors import LeaseLostError
from gradientmail.patterns._in_order import InOrderRecorder
from gradientmail.patterns._workers import CarriedError
from gradientmail.patterns.shared_queue._buffer_entries import Wake
from gradientmail.patterns.shared_queue._completion_gate import CompletionGate
from gradientmail.patterns.shared_queue._scope import Scope
from gradientmail.patterns.shared_queue._unit_claims import Held

__all__ = ["CompletionRecorder"]


class CompletionRecorder:
    """The completions thread of one learner.

    Guarantees: completions are recorded one at a time, in hand-over order; a unit leaves
    the holdings only once its completion is recorded; after the first failure nothing is
    lost from :attr:`error`, and :meth:`flush` returns once every hand-over is settled.
    """

    def __init__(
        self,
        scope: Scope,
        *,
        gate: CompletionGate,
        worker: str,
        wake: Callable[[Wake], object],
    ) -> None:
        self._scope = scope
        self._claims = scope.claims
        self._gate = gate
        self._worker = worker
        self._wake = wake
        #: The first failure: a ``WorkerError`` (the store's error, or any other), or
        #: ``LeaseLostError``.
        self.error: BaseException | None = None
        name = f"gradientmail-completions-{self._claims.learner_id}"
        self._thread: InOrderRecorder[tuple[Held, int]] = InOrderRecorder(name, self._complete)

    def start(self) -> None:
        self._thread.start()

    def hand_over(self, held: Held) -> None:
        """Record ``held`` done (in the consumer's thread, once its last item was taken)."""
        self._thread.hand_over((held, self._gate.mark()))

    def flush(self) -> None:
        """Wait until every unit handed over is recorded, failed, or refused by the gate."""
        self._thread.flush()

    def stop(self) -> None:
        """Record what is pending, then end the thread."""
        self._thread.stop()

    def _complete(self, entry: tuple[Held, int]) -> None:
        held, mark = entry
        if not self._gate.wait(mark):
            return  # its items were dropped downstream: it stays held, to be released
        recorded = self._record(held)
        if not recorded:
            # Wake a consumer blocked on an empty buffer (the loader may be waiting for this
            # very completion): it raises the error at its next item.
            self._wake(Wake())
            return
        self._scope.stats.units_completed += 1
        self._scope.holdings.remove(held.identifier)

    def _record(self, held: Held) -> bool:
        try:
            recorded = self._claims.complete(held)
        except BaseException as exc:  # noqa: BLE001 - any failure must reach the consumer
            # A store error, or anything else: left uncaught it would end this thread with
            # the unit still held, and a loader waiting for that completion would wait on.
            context = f"while recording the completion of unit {held.identifier!r}"
            self.error = CarriedError.of(exc).error(self._worker, context)
            return False
        if not recorded and self.error is None:
            self.error = LeaseLostError(
                f"unit {held.identifier!r} of {self._claims.learner_id!r} was taken over by "
                "another learner before its completion could be recorded (this learner's "
                "lease lapsed); the new owner trains it again",
                learner=self._claims.learner_id,
                units=(held.identifier,),
            )
        return recorded
