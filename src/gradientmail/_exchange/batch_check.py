"""Whether a training loop takes the items ``exchange.batch_size`` asks for.

An ``Exchange`` made with ``batch_size=`` cannot see the batches themselves: it weights a
learner's deltas, and measures its pace, by the items it asked each step to take. A loop
that keeps a batch size of its own instead (a DataLoader's fixed ``batch_size`` is the
common slip) still trains, but its deltas are weighted and its batches sized as if it had
taken what was asked: a silently wrong result. :class:`BatchCheck` reads the batch off
the model's training forwards and warns once when steps keep differing from what was asked.

The batch of a forward is the size of its first tensor argument (positional, else keyword)
along dimension 0, or 1 for sequence-first inputs. A step fits when, along one of those
dimensions, its training forwards sum to a batch asked (one forward, or gradient
accumulation over several) or each carries the same one whole (one batch seen twice, in two
forwards). A batch asked in any of the last :data:`RECENT` steps counts, so a loader that
reads ``exchange.batch_size`` ahead of the step fits while it catches up with a resize; so
does any of the last :data:`HANDED` batches an ``ExchangeBatchSampler`` made, however many a
DataLoader's workers hold ahead (``num_workers x prefetch_factor``). Forwards without
gradients or in eval mode (evaluation) are not counted, and a step with no forward of the
model seen (a loop that calls its submodules, a TorchScript model, which takes no hooks) is
not judged. The check never raises into the training loop: a forward whose input has no
plain sizes (a nested tensor) is skipped.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection
from typing import Any

import torch
from torch.utils.hooks import RemovableHandle

__all__ = ["HANDED", "PATIENCE", "RECENT", "BatchCheck", "fits"]

#: Consecutive steps that must miss the batch asked before the warning: one short step
#: (the last, partial batch of a dataset) is no mistake.
PATIENCE = 4
#: How many of the latest batches asked a step may have taken.
RECENT = 16
#: How many of the latest batches an ``ExchangeBatchSampler`` made a step may have taken:
#: more than any DataLoader holds ahead of the loop.
HANDED = 256
#: Forwards counted in one step at most (a model run on after its check was detached, as a
#: compiled one can be, must not grow the list without bound).
MAX_FORWARDS = 4096


class BatchCheck:
    """Tells once when a learner's steps persistently take another number of items than
    ``exchange.batch_size`` asked for (training thread only).

    Args:
        learner_id: the learner, for the message.
        patience: consecutive steps that must miss before the message.
        recent: how many of the latest batches asked a step may have taken.
    """

    def __init__(self, learner_id: str, patience: int = PATIENCE, recent: int = RECENT) -> None:
        self.learner_id = learner_id
        self.patience = patience
        self._asked: deque[int] = deque(maxlen=recent)
        #: The sizes of the latest batches made ahead of their steps (a batch sampler's).
        self._handed: deque[int] = deque(maxlen=HANDED)
        #: Each training forward's batch along dimensions 0 and 1 (None: no dimension 1).
        self._forwards: list[tuple[int, int | None]] = []
        self._misses = 0
        self.warned = False

    def attach(self, model: torch.nn.Module) -> RemovableHandle | None:
        """Watch ``model``'s forwards; the handle removes the hook. ``None``: the model takes
        no hooks (TorchScript), and its steps go unjudged."""
        try:
            return model.register_forward_pre_hook(self._forward, with_kwargs=True)
        except RuntimeError:
            return None

    def _forward(self, module: torch.nn.Module, args: Any, kwargs: Any) -> None:
        if not module.training or not torch.is_grad_enabled():
            return
        first = next(
            (a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor) and a.dim()),
            None,
        )
        if first is None or first.is_nested or len(self._forwards) >= MAX_FORWARDS:
            return
        try:
            rows = int(first.shape[0])
            columns = int(first.shape[1]) if first.dim() > 1 else None
        except (RuntimeError, TypeError):  # sizes a tensor subclass cannot give as numbers
            return
        self._forwards.append((rows, columns))

    def handed(self, size: int) -> None:
        """A batch of ``size`` items was made for a later step, however much later."""
        self._handed.append(size)

    def stepped(self, asked: int) -> str | None:
        """One step ended that was asked to take ``asked`` items: judge its forwards.

        Returns:
            The warning to give, once, when this step makes :attr:`patience` running that
            missed; else ``None``. The caller warns once the step is fully counted.
        """
        self._asked.append(asked)
        forwards, self._forwards = self._forwards, []
        if self.warned or not forwards:
            return None
        if fits(forwards, self._asked) or fits(forwards, self._handed):
            self._misses = 0
            return None
        self._misses += 1
        if self._misses < self.patience:
            return None
        self.warned = True
        took = sum(rows for rows, _ in forwards)
        return (
            f"learner {self.learner_id!r}: its last {self._misses} steps did not take the "
            f"items exchange.batch_size asked for (the last took {took}, asked {asked}), so "
            "its deltas are weighted, and its pace measured, as if they had: take exactly "
            "exchange.batch_size items each step, reading it before each step (a "
            "DataLoader: batch_sampler=ExchangeBatchSampler(exchange, sampler)), or make "
            "the Exchange without batch_size= to keep your own batch size"
        )


def fits(forwards: list[tuple[int, int | None]], asked: Collection[int]) -> bool:
    """Whether one step's training forwards carried a batch in ``asked``, along dimension
    0 or 1: summed (gradient accumulation), or each the same one whole (a batch seen twice)."""
    for dim in (0, 1):
        sizes = [f[dim] for f in forwards]
        if None in sizes:
            continue
        if sum(s or 0 for s in sizes) in asked or (len(set(sizes)) == 1 and sizes[0] in asked):
            return True
    return False
