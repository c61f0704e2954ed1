"""``SharedQueueLoader``: torch's DataLoader, telling its workers which batches the loop took.

See :mod:`gradientmail._torch_data.acks` for why and how; the guarantees are stated in
:mod:`gradientmail.torch`.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from typing import Any

from torch.utils.data import DataLoader
from torch.utils.data._utils.collate import default_collate, default_convert

from gradientmail._errors import ConfigurationError, WorkerError
from gradientmail._torch_data.acks import AckBoard, Tagged, Tagging
from gradientmail._torch_data.dataset import SharedQueueDataset

__all__ = ["SharedQueueLoader"]


class SharedQueueLoader(DataLoader[Any]):
    """A ``DataLoader`` over a :class:`SharedQueueDataset` that loses no item when the loop
    leaves early.

    Takes the same arguments as ``torch.utils.data.DataLoader``. With ``num_workers`` > 0
    a worker records a unit done only once the training loop has taken the batch holding
    the unit's last item, that is, once the loop asked for the batch after it. Batches that
    torch drops when the loop leaves early (a ``break``, an exception) therefore leave their
    units undone: the worker releases them, and the next iteration of the same epoch trains
    them. An iteration that runs to its end returns its last batch only once every worker
    has recorded its last units, so ``gradientmail status`` then shows the epoch complete.

    Args:
        dataset: the :class:`SharedQueueDataset` to load.
        *args: the rest of ``DataLoader``'s arguments.
        **kwargs: the rest of ``DataLoader``'s arguments.

    Raises:
        ConfigurationError: ``dataset`` is not a ``SharedQueueDataset``, or it waits for
            other learners (``wait_for_others=True``) with workers: a worker waiting for
            another's unit holds a partial batch that unit may wait for, a deadlock.
    """

    def __init__(self, dataset: SharedQueueDataset[Any], *args: Any, **kwargs: Any) -> None:
        if not isinstance(dataset, SharedQueueDataset):
            raise ConfigurationError(
                f"SharedQueueLoader loads a gradientmail.torch.SharedQueueDataset, not "
                f"{type(dataset).__name__}; use torch's DataLoader for other datasets"
            )
        super().__init__(dataset, *args, **kwargs)
        self._board: AckBoard | None = None
        if self.num_workers == 0:
            return
        if dataset.options.wait_for_others:
            raise ConfigurationError(
                "SharedQueueDataset(wait_for_others=True) with DataLoader workers: a worker "
                "waiting for another learner's unit holds a partial batch, whose units that "
                "learner's completions may wait for, a deadlock; use num_workers=0 to wait "
                "for others, or wait_for_others=False"
            )
        collate = self.collate_fn
        if collate is None:
            collate = default_collate if self.batch_size is not None else default_convert
        # Units whose items may be on their way to the loop, per worker: the batches torch
        # prefetches, the one the loop holds, the one being collated, and one more unit.
        per_batch = self.batch_size or 1
        slack = ((self.prefetch_factor or 2) + 3) * per_batch + 1
        self._board = AckBoard(self.num_workers, slack)
        self.collate_fn = Tagging(collate)

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]  # batches, untagged
        board = self._board
        if board is None:
            return super().__iter__()
        generation = board.begin()
        self.dataset._board = board  # type: ignore[attr-defined]  # read by workers starting now
        return _Taking(super().__iter__(), board, generation)


_SETTLING: dict[type, type] = {}


def _settling(cls: type) -> type:
    """``cls`` with a ``_shutdown_workers`` that first settles the iteration's gates."""
    made = _SETTLING.get(cls)
    if made is None:

        def _shutdown_workers(self: Any) -> None:
            ref = getattr(self, "_gradientmail_taking", None)
            taking = ref() if ref is not None else None
            try:
                if taking is not None:
                    taking._leave(finished=taking._asking)
            finally:
                cls._shutdown_workers(self)  # type: ignore[attr-defined]

        made = type(cls.__name__, (cls,), {"_shutdown_workers": _shutdown_workers})
        _SETTLING[cls] = made
    return made


class _Taking:
    """The loop's side of one iteration: untags each batch, and when the loop asks for the
    next one, tells the batch's worker that its items up to it were taken."""

    def __init__(self, inner: Any, board: AckBoard, generation: int) -> None:
        self._inner = inner
        self._board = board
        self._generation = generation
        self._pending: tuple[int, int] | None = None
        self._asking = False
        self._settled = False
        # The loader shuts its workers down from inside the call that finds the iteration
        # over (without persistent workers): the workers must have recorded their last
        # units by then. Shut down at any other time, the iteration was left early. The
        # iterator's class becomes a subclass whose shutdown settles first: no closure
        # holds the iterator, and the shutdown runs even when a garbage collection, which
        # clears weak references before finalizers, collects the iterator.
        if getattr(type(inner), "_shutdown_workers", None) is not None:
            inner.__class__ = _settling(type(inner))
        inner._gradientmail_taking = weakref.ref(self)

    def __iter__(self) -> _Taking:
        return self

    def __len__(self) -> int:
        return len(self._inner)

    def __next__(self) -> Any:
        pending = self._pending
        if pending is not None:
            self._board.took(pending[0], pending[1], self._generation)
            self._pending = None
        self._asking = True
        try:
            tagged = next(self._inner)
        except StopIteration:
            self._leave(finished=True)
            raise
        finally:
            self._asking = False
        if not isinstance(tagged, Tagged):
            raise ConfigurationError(
                f"SharedQueueLoader got an untagged batch ({type(tagged).__name__}): its "
                "collate_fn was replaced after it was built; pass collate_fn= to it instead"
            )
        self._pending = (tagged.worker, tagged.handed)
        return tagged.batch

    def _leave(self, *, finished: bool) -> None:
        """The iteration is over: run to its end (wait for the workers to record their last
        units), or left early (their gates give up: the units not taken are released)."""
        if self._settled:
            return
        self._settled = True
        board, generation = self._board, self._generation
        if not finished:
            board.seal(generation)
            return
        failures = board.settle(generation, self._alive)
        if failures:
            raise WorkerError(
                "SharedQueueLoader: a worker could not record the completions of its last "
                "units (they are trained again): " + "; ".join(failures)
            )

    def _alive(self, worker: int) -> bool:
        workers = getattr(self._inner, "_workers", None)
        if workers is None or worker >= len(workers):
            return True
        return bool(workers[worker].is_alive())
