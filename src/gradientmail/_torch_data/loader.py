"""``SharedQueueLoader``: torch's DataLoader, telling its workers which batches the loop took.

See :mod:`gradientmail._torch_data.acks` for why and how; the guarantees are stated in
:mod:`gradientmail.torch`.

An iteration that runs to its end returns only once every worker has recorded its last
units, so the workers must still be up when the loop finds the iteration over. torch's
iterator shuts non-persistent workers down from inside the very ``next()`` call that finds
the data exhausted, and offers no hook before it. So the workers run under a plain
DataLoader of the same settings whose workers persist (``persistent_workers=True``, public
API): at the end of an iteration they stay up, the loop waits for their last records, and
then, unless the user asked for persistent workers, the loader is dropped with its
iterator, which shuts them down (torch does so when an iterator is collected). Nothing of
torch's private classes is used.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from torch.utils.data import DataLoader, default_collate, default_convert

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
        #: With persistent workers: the loader that runs them, kept between iterations.
        self._kept: DataLoader[Any] | None = None

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]  # batches, untagged
        board = self._board
        if board is None:
            return super().__iter__()
        generation = board.begin()
        self.dataset._board = board  # type: ignore[attr-defined]  # read by workers starting now
        runner = self._kept if self._kept is not None else self._runner()
        if self.persistent_workers:
            self._kept = runner
        return _Taking(runner, board, generation, outer=self, keep=self.persistent_workers)

    def _runner(self) -> DataLoader[Any]:
        """A plain DataLoader with this one's settings whose workers persist past the end
        of an iteration (see the module docstring)."""
        return DataLoader(
            self.dataset,
            batch_size=self.batch_size,
            num_workers=self.num_workers,
            collate_fn=self.collate_fn,
            pin_memory=self.pin_memory,
            drop_last=self.drop_last,
            timeout=self.timeout,
            worker_init_fn=self.worker_init_fn,
            multiprocessing_context=self.multiprocessing_context,
            generator=self.generator,
            prefetch_factor=self.prefetch_factor,
            persistent_workers=True,
            pin_memory_device=self.pin_memory_device,
            in_order=self.in_order,
        )


class _Taking:
    """The loop's side of one iteration: untags each batch, and when the loop asks for the
    next one, tells the batch's worker that its items up to it were taken.

    Args:
        runner: the loader whose workers run the iteration (theirs persist).
        board: what the loop and the workers share.
        generation: this iteration's, on the board.
        outer: the ``SharedQueueLoader``, for ``len()``.
        keep: the workers persist after the iteration (the user asked for it); otherwise
            ``runner`` is let go once the iteration is over, which shuts its workers down.
    """

    def __init__(
        self,
        runner: DataLoader[Any],
        board: AckBoard,
        generation: int,
        *,
        outer: DataLoader[Any],
        keep: bool,
    ) -> None:
        self._runner: DataLoader[Any] | None = runner
        self._inner: Iterator[Any] | None = iter(runner)
        self._board = board
        self._generation = generation
        self._outer = outer
        self._keep = keep
        self._pending: tuple[int, int] | None = None
        self._settled = False

    def __iter__(self) -> _Taking:
        return self

    def __len__(self) -> int:
        return len(self._outer)

    def __next__(self) -> Any:
        pending = self._pending
        if pending is not None:
            self._board.took(pending[0], pending[1], self._generation)
            self._pending = None
        if self._inner is None:
            raise StopIteration  # over, and its workers let go
        try:
            tagged = next(self._inner)
        except StopIteration:
            # Every worker's data is exhausted; its workers are still up (they persist):
            # wait for their last records before the loop learns the iteration is over.
            self._leave(finished=True)
            raise
        if not isinstance(tagged, Tagged):
            raise ConfigurationError(
                f"SharedQueueLoader got an untagged batch ({type(tagged).__name__}): its "
                "collate_fn was replaced after it was built; pass collate_fn= to it instead"
            )
        self._pending = (tagged.worker, tagged.handed)
        return tagged.batch

    def __del__(self) -> None:
        # Left before its end (a break, an exception) and let go: by its reference count
        # at once, or by the garbage collector (a cycle), which runs this before the
        # runner's iterator is collected and shuts the workers down.
        self._leave(finished=False)

    def _leave(self, *, finished: bool) -> None:
        """The iteration is over: run to its end (wait for the workers to record their last
        units), or left early (their gates give up: the units not taken are released).
        Then, unless its workers persist, let the runner go: that shuts them down."""
        if self._settled:
            return
        self._settled = True
        board, generation = self._board, self._generation
        try:
            if not finished:
                board.seal(generation)
                return
            failures = board.settle(generation, board.alive)
            if failures:
                raise WorkerError(
                    "SharedQueueLoader: a worker could not record the completions of its "
                    "last units (they are trained again): " + "; ".join(failures)
                )
        finally:
            if not self._keep:
                self._inner = self._runner = None
