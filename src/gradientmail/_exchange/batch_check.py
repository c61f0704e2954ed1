"""Whether a training loop takes the items ``exchange.batch_size`` asks for.

An ``Exchange`` made with ``batch_size=`` cannot see the batches themselves: it weights a
learner's deltas, and measures its pace, by the items it asked each step to take. A loop
that keeps a batch size of its own instead (a DataLoader's fixed ``batch_size`` is the
common slip) still trains, but its deltas are weighted and its batches sized as if it had
taken what was asked: a silently wrong result. :class:`BatchCheck` reads the batch off
the model's training forwards and warns once when steps keep differing from what was asked.

The batch of a forward is the size of its first tensor argument (positional, else keyword)
along dimension 0, or 1 for sequence-first inputs. A step fits when, along one of those
dimensions, its training forwards sum to the batch asked (one forward, or gradient
accumulation over several) or each carries it whole (the same batch seen twice, as two
views are). Forwards without gradients or in eval mode (evaluation) are not counted, and a
step with no forward of the model seen (a loop that calls its submodules) is not judged.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch.utils.hooks import RemovableHandle

__all__ = ["PATIENCE", "BatchCheck"]

#: Consecutive steps that must miss the batch asked before the warning: one short step
#: (the last, partial batch of a dataset) is no mistake.
PATIENCE = 4


class BatchCheck:
    """Warns once (``RuntimeWarning``) when a learner's steps persistently take another
    number of items than ``exchange.batch_size`` asked for (training thread only).

    Args:
        learner_id: the learner, for the message.
        patience: consecutive steps that must miss before the warning.
    """

    def __init__(self, learner_id: str, patience: int = PATIENCE) -> None:
        self.learner_id = learner_id
        self.patience = patience
        #: Each training forward's batch along dimensions 0 and 1 (None: no dimension 1).
        self._forwards: list[tuple[int, int | None]] = []
        self._misses = 0
        self.warned = False

    def attach(self, model: torch.nn.Module) -> RemovableHandle:
        """Watch ``model``'s forwards; the handle removes the hook."""
        return model.register_forward_pre_hook(self._forward, with_kwargs=True)

    def _forward(self, module: torch.nn.Module, args: Any, kwargs: Any) -> None:
        if not module.training or not torch.is_grad_enabled():
            return
        first = next(
            (a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor) and a.dim()),
            None,
        )
        if first is not None:
            shape = first.shape
            self._forwards.append((shape[0], shape[1] if len(shape) > 1 else None))

    def stepped(self, asked: int) -> None:
        """One step ended that was asked to take ``asked`` items: judge its forwards."""
        forwards, self._forwards = self._forwards, []
        if self.warned or not forwards:
            return
        if fits(forwards, asked):
            self._misses = 0
            return
        self._misses += 1
        if self._misses >= self.patience:
            self.warned = True
            took = sum(batch for batch, _ in forwards)
            warnings.warn(
                f"learner {self.learner_id!r}: its last {self._misses} steps did not take the "
                f"items exchange.batch_size asked for (the last took {took}, asked {asked}), "
                f"so its deltas are weighted, and its pace measured, as if they had: take "
                "exactly exchange.batch_size items each step, reading it before each step, or "
                "make the Exchange without batch_size= to keep your own batch size",
                RuntimeWarning,
                stacklevel=2,
            )


def fits(forwards: list[tuple[int, int | None]], asked: int) -> bool:
    """Whether one step's training forwards carried the batch asked, along dimension 0 or
    1: summed (gradient accumulation), or each whole (two views of one batch)."""
    for dim in (0, 1):
        sizes = [f[dim] for f in forwards]
        if None in sizes:
            continue
        if sum(s for s in sizes if s is not None) == asked or all(s == asked for s in sizes):
            return True
    return False
