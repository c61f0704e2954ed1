"""``SharedQueueDataset``: a ``shared_queue`` per DataLoader worker, as an ``IterableDataset``.

The public door is :mod:`gradientmail.torch`, whose docstring states the guarantees. In a
worker of a :class:`~gradientmail.torch.SharedQueueLoader` the worker's queue records a unit
done only once the training loop took the batch holding the unit's last item (see
:mod:`gradientmail._torch_data.acks`); a plain DataLoader with workers is refused, since
there nobody could tell.
"""

from __future__ import annotations

import logging
import os
import pickle
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager
from multiprocessing import RawValue
from multiprocessing import context as _mp_context
from typing import Any, TypeVar

from torch.utils.data import IterableDataset, get_worker_info

from gradientmail._errors import ConfigurationError
from gradientmail._identity import learner_id as launcher_learner_id
from gradientmail._keys import validate_segment
from gradientmail._torch_data.acks import AckBoard, WorkerGate, current_gate
from gradientmail._torch_world import world_size as _distributed_world_size
from gradientmail.backends._options import positive, redact
from gradientmail.mailbox import Capability, Mailbox
from gradientmail.patterns._progress import check_reporter, pop_reporter
from gradientmail.patterns.shared_queue import SharedQueue
from gradientmail.patterns.shared_queue._completion_gate import IMMEDIATELY, CompletionGate
from gradientmail.patterns.shared_queue._open import open_queue
from gradientmail.patterns.shared_queue._options import DEFAULT_LEASE, check_epoch, queue_options
from gradientmail.session import Session, active_session

__all__ = ["SharedQueueDataset"]

_log = logging.getLogger("gradientmail.torch")

T = TypeVar("T")


class SharedQueueDataset(IterableDataset[T]):
    """The items of the units this rank's DataLoader workers claim, each unit once per epoch.

    Args:
        units: identifier -> unit value, the same mapping on every rank (see
            ``shared_queue``).
        mailbox: the run's mailbox, shared across processes (``file://``, ``s3://``,
            ``gs://``, ``az://``).
        load: ``load(unit)`` returns an iterable of items; it runs in a background thread of
            each worker (of the training process with ``num_workers=0``).
        learner_id: this rank's id; :func:`gradientmail.learner_id` when ``None``. Workers
            append ``-w{worker}``.
        prefetch: items each worker's loader may be ahead of it (at least 1).
        order: a preference order over the identifiers (see ``shared_queue``).
        shuffle: a seed for a per-epoch preference order, the same on every learner.
        lease: seconds without renewal after which others may take a learner's units.
        publish_every: seconds between the workers' progress publications.
        wait_for_others: wait for units other learners hold, and take over those of
            learners that die, instead of ending the epoch when no unit is free (see the
            module docstring for when that is safe).
        epochs: several epochs in each iteration, for example ``range(10)``: one
            ``for batch in loader`` then runs them all, and they flow (see
            ``shared_queue(epochs=)``); :meth:`set_epoch` is then not used.

    Raises:
        ConfigurationError: a bad argument (checked here, in the training process, not in
            the workers).
        InvalidKeyError: an identifier or the learner id is not a valid key segment.
    """

    def __init__(
        self,
        units: Mapping[str, Any],
        *,
        mailbox: Mailbox,
        load: Callable[[Any], Iterable[T]],
        learner_id: str | None = None,
        prefetch: int = 8,
        order: Iterable[str] | None = None,
        shuffle: int | None = None,
        lease: float = DEFAULT_LEASE,
        publish_every: float = 5.0,
        wait_for_others: bool = False,
        epochs: Iterable[int] | None = None,
    ) -> None:
        #: Every worker's queue opens with these (checked here, as ``shared_queue`` checks).
        self.options = queue_options(
            units, load, prefetch, order, shuffle, lease, wait_for_others, epochs
        )
        self.units = units
        self.mailbox = mailbox
        self.load = load
        self.learner_id = validate_segment(
            launcher_learner_id() if learner_id is None else learner_id, "learner id"
        )
        self.publish_every = float(positive(publish_every, "publish_every"))
        # Shared memory: workers started before set_epoch (persistent_workers) read it too.
        self._epoch: Any = RawValue("q", 0)
        self._worker_box: tuple[int, Mailbox] | None = None
        #: Set by the SharedQueueLoader that starts the workers: how they learn which
        #: batches the training loop took.
        self._board: AckBoard | None = None

    # -- epochs -------------------------------------------------------------------------------

    @property
    def epoch(self) -> int:
        """The epoch the next iteration delivers."""
        return int(self._epoch.value)

    def set_epoch(self, epoch: int) -> None:
        """Make the next iteration (every worker's, persistent ones included) epoch ``epoch``.

        Call it before each epoch's ``for batch in loader``, as with ``DistributedSampler``.

        Raises:
            ConfigurationError: ``epoch`` is not an int >= 0.
        """
        check_epoch(epoch)
        if self.options.epochs is not None:
            warnings.warn(
                f"SharedQueueDataset.set_epoch({epoch}) has no effect: this dataset runs "
                f"epochs {self.options.epochs[0]}..{self.options.epochs[-1]} in each iteration "
                "(epochs=); drop set_epoch, or drop epochs= to run one epoch per iteration",
                RuntimeWarning,
                stacklevel=2,
            )
        self._epoch.value = epoch

    # -- iterating ----------------------------------------------------------------------------

    def __iter__(self) -> Iterator[T]:
        """Start this process's learner for the current epoch (checks happen right here)."""
        info = get_worker_info()
        if info is None:
            learner, mailbox = self.learner_id, self.mailbox
            processes = _distributed_world_size()
            if processes > 1:
                self._require_shared(f"in a torch.distributed job of {processes} processes")
        else:
            learner = f"{self.learner_id}-w{info.id}"
            self._require_shared(f"with DataLoader num_workers={info.num_workers}")
            board = self._board
            if board is None:
                raise ConfigurationError(
                    f"SharedQueueDataset in a plain DataLoader with num_workers="
                    f"{info.num_workers}: torch drops the batches still in its worker queues "
                    "when a loop leaves early, and a worker cannot tell them from the ones "
                    "the loop took, so units would be recorded done with items never "
                    "trained; use gradientmail.torch.SharedQueueLoader(dataset, ...) with "
                    "the same arguments as DataLoader (or num_workers=0)"
                )
            gate = WorkerGate(board, info.id)
            return self._deliver_gated(learner, self._own_mailbox(), gate, self.epoch)
        return self._deliver(learner, mailbox, self.epoch)

    def _require_shared(self, where: str) -> None:
        if not self.mailbox.supports(Capability.SHARED_ACROSS_PROCESSES):
            raise ConfigurationError(
                f"SharedQueueDataset over {redact(self.mailbox.url)} {where}: this mailbox is "
                "not shared across processes, so each process would get its own copy of the "
                "store and deliver every unit again; use a shared store (file://, s3://, "
                "gs://, az://), or num_workers=0 in a single process"
            )

    def _own_mailbox(self) -> Mailbox:
        """This worker process's own handle, reopened from the mailbox's URL and options."""
        pid = os.getpid()
        if self._worker_box is None or self._worker_box[0] != pid:
            box: Mailbox = pickle.loads(pickle.dumps(self.mailbox))
            self._worker_box = (pid, box)
        return self._worker_box[1]

    def _deliver(self, learner: str, mailbox: Mailbox, epoch: int) -> Iterator[T]:
        session = active_session(learner)
        own = session is None
        if session is None:
            session = Session(mailbox, learner, publish_every=self.publish_every)
            session.__enter__()
        try:
            with self._queue(learner, mailbox, epoch, session) as items:
                for item in items:
                    if own:
                        session.step(samples=1)
                    yield item
                self._warn_if_complete(mailbox, epoch, items.stats.units_done_before)
        except GeneratorExit:
            # The loop left early (a break, the DataLoader shutting down): not a failure.
            # The queue has released this learner's unfinished units.
            if own:
                session.__exit__(None, None, None)
            raise
        except BaseException as exc:
            if own:
                session.__exit__(type(exc), exc, exc.__traceback__)
            raise
        if own:
            session.__exit__(None, None, None)

    def _queue(
        self,
        learner: str,
        mailbox: Mailbox,
        epoch: int,
        session: Session,
        gate: CompletionGate = IMMEDIATELY,
    ) -> AbstractContextManager[SharedQueue[Any]]:
        check_reporter(session, mailbox)
        info = get_worker_info()
        workers = 0 if info is None else info.num_workers
        siblings = {f"{self.learner_id}-w{worker}" for worker in range(workers)} - {learner}
        return open_queue(
            self.options,
            mailbox=mailbox,
            learner_id=learner,
            epoch=epoch,
            reporter=session,
            gate=gate,
            siblings=frozenset(siblings),
        )

    def _deliver_gated(
        self, learner: str, mailbox: Mailbox, gate: WorkerGate, epoch: int
    ) -> Iterator[T]:
        """A SharedQueueLoader worker's iteration: each unit is recorded done only once the
        loop took its last item; the last ones after this generator returned, by a closing
        thread, since the DataLoader collates the worker's last batch only then."""
        _CLOSER.wait_for_previous()
        current_gate(gate)
        board, worker, generation = gate.board, gate.worker, gate.generation
        session = Session(mailbox, learner, publish_every=self.publish_every)
        session.__enter__()
        try:
            with self._queue(learner, mailbox, epoch, session, gate) as items:
                try:
                    for item in items:
                        session.step(samples=1)
                        gate.count += 1  # before the yield: the collate reads it after
                        yield item
                except BaseException:
                    gate.abandon()  # the items not taken yet never will be: release them
                    board.closing(worker, generation)
                    raise
                self._warn_if_complete(mailbox, epoch, items.stats.units_done_before)
                board.closing(worker, generation)
                pop_reporter(session)  # this thread's; the closer ends the session
                _CLOSER.start(items, session, gate)
        except BaseException as exc:
            if not _CLOSER.started(gate):
                if isinstance(exc, GeneratorExit):  # the loop left early: not a failure
                    session.__exit__(None, None, None)
                else:
                    session.__exit__(type(exc), exc, exc.__traceback__)
                board.closed(worker, generation, None)
            raise

    def _warn_if_complete(self, mailbox: Mailbox, epoch: int, done_before: int) -> None:
        """Say so when this iteration's epoch was complete before it began: it yielded nothing."""
        if self.options.epochs is not None:
            if done_before >= len(self.units) * len(self.options.epochs):
                warnings.warn(
                    f"SharedQueueDataset: every epoch of {list(self.options.epochs)} at "
                    f"{redact(mailbox.url)} was already complete, so this iteration yielded "
                    "nothing; give the next epochs (epochs=range(k, n)) or a new URL",
                    RuntimeWarning,
                    stacklevel=2,
                )
            return
        if done_before < len(self.units):
            return
        warnings.warn(
            f"SharedQueueDataset: epoch {epoch} at {redact(mailbox.url)} was already complete, "
            "so this iteration yielded nothing; call dataset.set_epoch(k) with the next epoch "
            "before each epoch's loop (as with DistributedSampler)",
            RuntimeWarning,
            stacklevel=2,
        )

    # -- pickling (spawned workers, copies) ---------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_worker_box"] = None
        if _mp_context.get_spawning_popen() is None:
            # A copy, not a worker being started: shared memory only travels to children.
            state["_epoch"] = self.epoch
            state["_board"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        if isinstance(state["_epoch"], int):
            state["_epoch"] = RawValue("q", state["_epoch"])
        self.__dict__.update(state)

    def __repr__(self) -> str:
        return (
            f"<SharedQueueDataset {len(self.units)} units, learner {self.learner_id!r}, "
            f"epoch {self.epoch}, mailbox {redact(self.mailbox.url)!r}>"
        )


class _Closer:
    """The thread that closes a worker's queue after its generator returned (one per
    worker process at a time): it records the last completions once the loop took their
    items, ends the session, and says so on the board."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._gate: WorkerGate | None = None

    def start(self, items: SharedQueue[Any], session: Session, gate: WorkerGate) -> None:
        def closed(error: BaseException | None) -> None:
            try:
                if error is None:
                    session.__exit__(None, None, None)
                else:
                    session.__exit__(type(error), error, error.__traceback__)
            except BaseException as exc:  # noqa: BLE001 - said on the board below
                error = error or exc
            message = None
            if error is not None:
                message = f"{type(error).__name__}: {error}"
                _log.error(
                    "learner %r could not finish its iteration: %s", items.learner_id, message
                )
            gate.board.closed(gate.worker, gate.generation, message)

        self._gate = gate
        self._thread = items.close_in_background(closed)

    def started(self, gate: WorkerGate) -> bool:
        return self._gate is gate

    def wait_for_previous(self) -> None:
        """Before a new iteration in this worker: the previous one's queue is closed (its
        lease ended), so the new one, under the same learner id, need not wait for it."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None


#: This process's closer (a worker process runs one iteration's generator at a time).
_CLOSER = _Closer()
