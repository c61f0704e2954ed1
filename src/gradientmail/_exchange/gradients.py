"""What measures a learner's gradients for the noise gain (``gradientmail._exchange.noise``),
and whether it does: the torch side of the gain, on the training thread."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch.utils.hooks import RemovableHandle

from gradientmail._errors import ConfigurationError

__all__ = ["GradientMeter", "wants_gain"]

#: How much of the newest step's gradient mean square enters the smoothed one (about the
#: last 16 steps).
SMOOTHING = 1 / 16


def wants_gain(gain: object, optimizer: torch.optim.Optimizer | None) -> bool:
    """Whether this learner measures its gradients and weights its deltas by the gain:
    ``gain`` checked (a bool, and ``True`` only with the optimizer it measures at)."""
    if not isinstance(gain, bool):
        raise ConfigurationError(
            f"gain must be True (for an adaptive optimizer such as AdamW) or False, not {gain!r}"
        )
    if gain and optimizer is None:
        raise ConfigurationError(
            "gain=True measures the gradients at each optimizer step: pass optimizer= too"
        )
    return gain


class GradientMeter:
    """This learner's gradients' mean square (``|g|^2`` over every parameter that has a
    gradient), smoothed over its last steps, measured just before each optimizer step.

    It runs on the training thread and stays on the gradients' device, with no
    synchronisation: each step makes a new tensor, so the one :meth:`latest` handed to the
    exchange thread never changes under it. Sparse gradients are left out.

    Args:
        parameters: the model's parameters.
    """

    def __init__(self, parameters: Iterable[torch.nn.Parameter]) -> None:
        self._parameters = [p for p in parameters if p.requires_grad]
        self._smoothed: torch.Tensor | None = None

    def attach(self, optimizer: torch.optim.Optimizer) -> RemovableHandle:
        """Measure before each of ``optimizer``'s steps, until the handle is removed."""
        return optimizer.register_step_pre_hook(self.measure)

    def measure(self, *_: Any) -> None:
        """Add the gradients as they are now to the smoothed mean square."""
        grads = [p.grad for p in self._parameters if p.grad is not None and not p.grad.is_sparse]
        if not grads:
            return
        square = torch.nn.utils.get_total_norm(grads, 2.0).float() ** 2
        smoothed = self._smoothed
        self._smoothed = square if smoothed is None else smoothed + SMOOTHING * (square - smoothed)

    def latest(self) -> torch.Tensor | None:
        """The smoothed mean square so far (a 0-d tensor), or ``None`` before any step."""
        return self._smoothed
