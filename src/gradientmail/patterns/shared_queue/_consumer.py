"""The consumer side of a ``shared_queue`` learner: iteration over its epochs, and leaving.

:class:`SharedQueue` takes the learner's one lease, runs one
:class:`~gradientmail.patterns.shared_queue._epoch.EpochRun` per open epoch, turns their
buffers into items for the training loop, and on close stops them in order (loaders first,
then pending completions, then the lease).

Epochs that flow: given several epochs, the learner works in the first; once no unit of it
is free (the rest are in progress elsewhere) it opens the next one beside it, and takes
that epoch's units while it still watches the older one and takes over a dead learner's
units there. Items of the older epoch always come first. A third epoch opens only once the
oldest has ended, so a learner is never more than one epoch ahead of the oldest unit in
progress. A learner that does not wait for others (``wait_for_others=False``, or without
compare-and-swap) leaves an epoch as soon as none of its units is free, and so goes on
through the epochs as far as units are free. The lease names the open epochs (``epochs``;
``epoch`` is the oldest), so the other learners of each epoch count this one as working
there.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from gradientmail._errors import BackendError, LeaseLostError
from gradientmail.patterns._leases import Lease
from gradientmail.patterns._patience import Patient
from gradientmail.patterns._run_layout import LEASES_PREFIX, check_manifest
from gradientmail.patterns._workers import Bell
from gradientmail.patterns.shared_queue._epoch import EMPTY, EpochRun
from gradientmail.patterns.shared_queue._scope import Setup
from gradientmail.patterns.shared_queue._stats import QueueCost, QueueStats

__all__ = ["SharedQueue"]

#: Opening an epoch beside an unfinished one, at INFO.
_log = logging.getLogger("gradientmail.patterns.shared_queue")

T = TypeVar("T")


class SharedQueue(Generic[T]):
    """The iterator ``shared_queue`` yields: items of the units this learner holds.

    Iterate it in the thread that entered the ``with`` block. ``stats`` is live telemetry
    (summed over the epochs); ``epoch`` is the epoch of the item returned last.
    """

    #: A store error while releasing units on an early exit (they come back when the lease
    #: expires instead); ``None`` otherwise.
    release_error: BackendError | None = None

    def __init__(
        self,
        setup: Setup,
        epochs: Sequence[tuple[int, list[str]]],
        *,
        lease: float,
    ) -> None:
        self.learner_id = setup.learner_id
        self.epoch = epochs[0][0]
        self._stats = QueueStats()
        self._setup = setup
        self._pending = deque(epochs)
        #: Each epoch's place in the order this learner goes through them.
        self._position = {epoch: place for place, (epoch, _) in enumerate(epochs)}
        #: Whether this learner left an epoch while others held units of it.
        self._unfinished = False
        self._lease = Lease(
            setup.mailbox,
            LEASES_PREFIX + setup.learner_id,
            setup.learner_id,
            duration=lease,
            extra={"epoch": self.epoch, "epochs": [self.epoch]},
        )
        self._bell = Bell()
        self._open: list[EpochRun[T]] = []
        self._state = _State()

    @property
    def stats(self) -> QueueStats:
        """Live telemetry (see :class:`QueueStats`); its ``cost`` is a view of the requests
        counted so far, taken now."""
        self._stats.cost = QueueCost.of(self._setup.tally.counts(), self._lease.renewals)
        return self._stats

    def _start(self) -> None:
        """Check the manifest, take the lease, open the first epoch. Each request waits out
        a store outage shorter than the lease, as the loader's do."""
        setup = self._setup
        patience = self._lease.duration
        what = f"shared_queue learner {setup.learner_id!r}"
        starting = Patient(setup.mailbox, patience, threading.Event(), what)
        check_manifest(starting, self._pending[0][1], setup.units)
        self._lease.acquire(patience=patience)
        self._lease.start()
        self._open_next()

    # -- consumer side ------------------------------------------------------------------------

    def __iter__(self) -> SharedQueue[T]:
        return self

    def __next__(self) -> T:
        state = self._state
        if state.done:
            raise StopIteration
        bell = self._bell
        try:
            while True:
                seen = bell.rings  # before looking: a ring after this is never missed
                if self._pending and self._may_open():
                    # Checked at every item, so the next epoch's loader prefetches while the
                    # consumer trains the older epoch's last buffered items.
                    self._open_next()
                ended = None
                for run in self._open:  # the oldest epoch first
                    try:
                        item = run.take()
                    except StopIteration:
                        ended = run
                        break
                    if item is not EMPTY:
                        self.epoch = run.epoch
                        self._stats.items_delivered += 1
                        return item  # type: ignore[return-value]  # not EMPTY: an item
                if ended is not None:
                    self._ended(ended)
                    continue
                if not self._open:
                    state.exhausted = True
                    self._stats.run_complete = not self._unfinished and not self._pending
                    raise StopIteration
                self._waited(bell.wait(seen))
        except LeaseLostError:
            state.done = state.fenced = True  # taken over, or too stale to renew in time
            raise
        except BaseException:
            state.done = True
            raise

    def _waited(self, seconds: float) -> None:
        if seconds:
            self._stats.wait_s += seconds
            if self._setup.reporter is not None:
                self._setup.reporter.data_waited(seconds)

    def _may_open(self) -> bool:
        """Whether to open the next epoch now: when none is open, or when no unit of the
        open one is free; never more than one epoch after the oldest one open."""
        following = self._position[self._pending[0][0]]
        if self._open and following - self._position[self._open[0].epoch] > 1:
            return False
        return all(run.dry.is_set() for run in self._open)

    def _open_next(self) -> None:
        """Open the next pending epoch, and say so in the lease."""
        epoch, identifiers = self._pending.popleft()
        if self._open:
            _log.info(
                "%r opens epoch %d while units of epoch %d are in progress elsewhere",
                self.learner_id,
                epoch,
                self._open[0].epoch,
            )
        run: EpochRun[T] = EpochRun(
            self._setup,
            epoch,
            identifiers,
            lease=self._lease,
            stats=self._stats,
            bell=self._bell,
        )
        self._open.append(run)
        self._name_epochs()
        run.start()

    def _ended(self, run: EpochRun[T]) -> None:
        """An epoch ended: close it (later, by :meth:`close`, where its last completions may
        wait for items downstream); go on with the others."""
        self._open.remove(run)
        if run.completes_at_close:
            self._state.ended.append(run)
        else:
            run.close()
        if not run.complete:
            # Left while others held units (wait_for_others=False, or claims are permanent):
            # they finish them; this learner goes on, so the run is not complete for it.
            self._unfinished = True
        if self._open:
            self._name_epochs()

    def _name_epochs(self) -> None:
        """Say in the lease which epochs this learner works in, at once."""
        epochs = [run.epoch for run in self._open]
        if self._lease.extra.get("epochs") == epochs:
            return  # as the lease already says (the first epoch: as it was acquired)
        try:
            self._lease.retarget(epoch=epochs[0], epochs=epochs)
        except LeaseLostError:
            raise  # fenced: the consumer raises it
        except BackendError as exc:
            # The next background renewal writes it. Meanwhile the others of the new epoch
            # may count this learner absent there, which can delay that epoch's end (a
            # listing of done/ decides it), never bring it forward.
            _log.debug("%r could not name its epochs in its lease yet: %s", self.learner_id, exc)

    # -- leaving ------------------------------------------------------------------------------

    def close(self) -> None:
        """Stop prefetching, record pending completions, release or finish. Idempotent.

        Waits for at most each loader's current ``load`` step or mailbox call. Left before
        the end (not exhausted), it releases every unit it holds that is not done, so other
        learners take them at once. Store errors while releasing are kept in
        :attr:`release_error`: the units then come back when the lease expires.

        Raises:
            WorkerError: (a gate with slack, after the last item) recording a last
                completion failed.
            LeaseLostError: (a gate with slack, after the last item) a unit was taken over
                before its
                completion could be recorded.
        """
        if self._begin_close():
            self._close()

    def close_in_background(
        self, closed: Callable[[BaseException | None], None]
    ) -> threading.Thread:
        """:meth:`close` in a new non-daemon thread, returned started, which then calls
        ``closed`` with what close raised (``None``: nothing). From now on :meth:`close`
        returns at once. For a queue whose gate has slack, whose consumer must return
        before its last completions can be recorded."""
        first = self._begin_close()

        def run() -> None:
            try:
                if first:
                    self._close()
            except BaseException as exc:  # noqa: BLE001 - handed to ``closed``
                closed(exc)
            else:
                closed(None)

        thread = threading.Thread(
            target=run, name=f"gradientmail-close-{self.learner_id}", daemon=False
        )
        thread.start()
        return thread

    def _begin_close(self) -> bool:
        """Mark the queue closed; whether this call is the first to close it."""
        state = self._state
        if state.closed:
            return False
        state.closed = state.done = True
        return True

    def _close(self) -> None:
        state = self._state
        fenced = False
        error: BackendError | None = None
        runs = [*state.ended, *self._open]
        for run in runs:
            try:
                fenced = run.close() or fenced
            except BackendError as exc:
                error = error or exc
        self._open.clear()
        state.ended.clear()
        failed = next(
            (run.error for run in runs if run.completes_at_close and run.error is not None), None
        )
        if fenced or state.fenced or self._lease.lost:
            # Stops renewing. A lost lease is left as it was written; one fenced for being
            # too stale to renew reads ``failed`` if the store takes the write, and else
            # expires (the store error must not replace the LeaseLostError being raised).
            try:
                self._lease.end("failed")
            except BackendError as exc:
                self.release_error = error or exc
        else:
            try:
                self._lease.end("finished" if state.exhausted and failed is None else "released")
            except BackendError as exc:
                error = error or exc
            self.release_error = error
        if failed is not None and state.exhausted:
            raise failed  # a last completion at close failed (taken over, or the store)


class _State:
    """Where the consumer is: iterating, done (no more items), exhausted (every epoch
    ended, not left early), closed."""

    __slots__ = ("closed", "done", "ended", "exhausted", "fenced")

    def __init__(self) -> None:
        self.done = False
        #: The loop raised ``LeaseLostError``: nothing is released or recorded finished.
        self.fenced = False
        self.exhausted = False
        self.closed = False
        #: Ended epochs whose last completions wait for the gate, closed by ``close``.
        self.ended: list[EpochRun[Any]] = []
