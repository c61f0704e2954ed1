"""``gradientmail.torch``: the DataLoader adapter, and one model trained by unequal learners.

:class:`Exchange` and :func:`load_shared` are documented in ``docs/exchange.md``; below, the
DataLoader adapter: a ``shared_queue`` as an ``IterableDataset``.

Needs torch (``pip install 'gradientmail[torch]'``, or any torch >= 2.13 you already have);
``import gradientmail`` never imports this module::

    import gradientmail
    from gradientmail.torch import SharedQueueDataset
    from torch.utils.data import DataLoader

    box = gradientmail.from_url("s3://bucket/run-7")       # every rank opens the same URL
    dataset = SharedQueueDataset(shards, mailbox=box, load=load_shard)
    loader = DataLoader(dataset, batch_size=32, num_workers=4, persistent_workers=True)
    for epoch in range(3):
        dataset.set_epoch(epoch)
        for batch in loader:
            train(batch)

Guarantees
    * **Every unit once per epoch, across all workers of all ranks.** Each DataLoader
      worker runs its own ``shared_queue`` learner, named ``{learner_id}-w{worker}``
      (``learner_id`` alone with ``num_workers=0``); the learners share the units through
      the mailbox. ``learner_id`` defaults to :func:`gradientmail.learner_id`, so each rank
      of a torchrun or SLURM job has its own and ``gradientmail status`` lists a rank's
      workers right after it.
    * **An epoch ends when no unit is free.** A worker's iteration ends as soon as every
      unit is claimed (``shared_queue(wait_for_others=False)``): it never waits for units
      another worker or rank holds, which would deadlock lockstep training and a DataLoader
      that collects its workers' batches in order. Units held by a worker or rank that dies
      are finished when it restarts under the same learner id (same rank, same
      ``num_workers``), which resumes them first; until then ``gradientmail status`` shows
      them in progress. ``wait_for_others=True`` waits instead, and takes over the units of
      learners that died: only without lockstep training, and with ``num_workers`` 0 or 1
      or ``DataLoader(in_order=False)``.
    * **Epochs.** :meth:`SharedQueueDataset.set_epoch` ``(k)`` makes the next iteration
      epoch ``k`` (``shared_queue(epoch=k)``, with the ``shuffle`` seed). The epoch lives in
      shared memory, so workers kept by ``persistent_workers=True`` see it too. Iterating
      again without ``set_epoch`` repeats the same epoch, which is then already done and
      yields nothing, like a resumed run whose epoch is complete: a ``RuntimeWarning``
      (from each worker) says so and names ``set_epoch``.
    * **No silent duplicates.** A mailbox that is not shared across processes
      (``memory://``) is refused with :class:`~gradientmail.ConfigurationError` in
      a DataLoader worker and in a ``torch.distributed`` job of more than one process: each
      process would get its own copy of the store and deliver every unit again.
    * **Errors name the unit and the worker.** An exception from ``load`` or the store
      ends that worker's iteration; the DataLoader raises it in the training loop as the
      same type (:class:`~gradientmail.WorkerError`,
      :class:`~gradientmail.LeaseLostError`, ...), its message naming the unit, the
      learner id (``rank0-w1``) and the worker process.
    * **Progress.** Each worker reports to a :class:`~gradientmail.session.Session` under
      its learner id, which counts one step and one sample per item and publishes the
      worker's units and data wait. With ``num_workers=0`` a Session for ``learner_id``
      already entered in the training loop's thread is used instead (and counts what the
      loop counts).
    * **Own connections.** Each worker process opens its own mailbox handle from the
      mailbox's URL and options, so no connection or descriptor is shared across a fork.

``units``, ``load`` and the mailbox travel to the workers by pickling when the DataLoader
spawns them (``multiprocessing_context="spawn"``): use module-level functions for ``load``.
"""

from __future__ import annotations

import os
import pickle
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from multiprocessing import RawValue
from multiprocessing import context as _mp_context
from typing import Any, TypeVar

import torch.distributed
from torch.utils.data import IterableDataset, get_worker_info

from gradientmail._errors import ConfigurationError
from gradientmail._exchange.learner import Exchange
from gradientmail._exchange.rules import Average, DelayedNesterov
from gradientmail._exchange.stats import ExchangeStats
from gradientmail._exchange.store import load_shared
from gradientmail._identity import learner_id as launcher_learner_id
from gradientmail._keys import validate_segment
from gradientmail.backends._options import lease_seconds, positive, redact
from gradientmail.mailbox import Capability, Mailbox
from gradientmail.patterns.shared_queue import DEFAULT_LEASE, shared_queue
from gradientmail.patterns.shared_queue._policy.preference import check_epochs, preference_order
from gradientmail.session import Session, active_session

__all__ = [
    "Average",
    "DelayedNesterov",
    "Exchange",
    "ExchangeStats",
    "SharedQueueDataset",
    "load_shared",
]

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
        order: Sequence[str] | None = None,
        shuffle: int | None = None,
        lease: float = DEFAULT_LEASE,
        publish_every: float = 5.0,
        wait_for_others: bool = False,
        epochs: Iterable[int] | None = None,
    ) -> None:
        if not isinstance(units, Mapping):
            raise ConfigurationError(
                f"units must be a mapping of identifier -> unit, not {type(units).__name__}"
            )
        if not callable(load):
            raise ConfigurationError(f"load must be callable (unit -> iterable of items): {load!r}")
        preference_order(units, order, shuffle, 0)  # every identifier and order checked now
        self.units = units
        self.mailbox = mailbox
        self.load = load
        self.learner_id = validate_segment(
            launcher_learner_id() if learner_id is None else learner_id, "learner id"
        )
        self.publish_every = float(positive(publish_every, "publish_every"))
        if not isinstance(wait_for_others, bool):
            raise ConfigurationError(f"wait_for_others must be True or False: {wait_for_others!r}")
        passes = None if epochs is None else tuple(check_epochs(epochs, 0))
        self.options = _QueueOptions(
            positive(prefetch, "prefetch", integer=True),
            order,
            shuffle,
            lease_seconds(lease),
            wait_for_others,
            passes,
        )
        # Shared memory: workers started before set_epoch (persistent_workers) read it too.
        self._epoch: Any = RawValue("q", 0)
        self._worker_box: tuple[int, Mailbox] | None = None

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
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise ConfigurationError(f"epoch must be an int >= 0, not {epoch!r}")
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
            mailbox = self._own_mailbox()
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
        options = self.options
        passes = {"epoch": epoch} if options.epochs is None else {"epochs": options.epochs}
        try:
            with shared_queue(
                self.units,
                mailbox=mailbox,
                learner_id=learner,
                load=self.load,
                prefetch=options.prefetch,
                order=options.order,
                shuffle=options.shuffle,
                lease=options.lease,
                session=session,
                wait_for_others=options.wait_for_others,
                **passes,
            ) as items:
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


@dataclass(frozen=True)
class _QueueOptions:
    """What each worker passes to ``shared_queue``, besides the units and the epoch."""

    prefetch: int
    order: Sequence[str] | None
    shuffle: int | None
    lease: float
    wait_for_others: bool
    #: Several epochs per iteration, or ``None`` for the one ``set_epoch`` names.
    epochs: tuple[int, ...] | None


def _distributed_world_size() -> int:
    """Processes in the ``torch.distributed`` job (1 when there is none)."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return int(torch.distributed.get_world_size())
    try:
        return max(1, int(os.environ.get("WORLD_SIZE", "1")))
    except ValueError:
        return 1
