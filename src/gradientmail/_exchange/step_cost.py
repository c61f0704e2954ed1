"""A learner's fixed step cost: the part of its step time that no item adds.

On a real GPU a step of ``b`` items takes about ``fixed + per_item x b`` seconds: kernel
launches, the optimizer's update and a loader's round trip cost the same whatever the
batch. The batch rule (``gradientmail._exchange.pace``) sizes each learner's batch to fit
the fastest learner's step time; with a fixed part, a slow GPU can fit fewer items than
proportional pacing says, or none at all, and it needs to know. Rules only, no I/O and no
clock: the learner's :class:`~gradientmail._exchange.pace.Pace` feeds it step times.
"""

from __future__ import annotations

import math
import statistics
from collections import deque

__all__ = ["StepCost"]

#: The steps a learner's fixed step cost is fitted from: its most recent ones.
COST_WINDOW = 48
#: The fit needs batches this far apart in the window (largest / smallest): closer ones,
#: under a step time's usual noise, say nothing about the cost of an item.
COST_SPREAD = 1.5
#: Steps further above the fitted line than this many robust deviations (an evaluation,
#: a checkpoint, a stall, a new batch shape's first step) are left out of the fit.
COST_OUTLIER = 3.0
#: Without batches far enough apart, or with steps slower as the batch shrank, the fixed
#: cost last fitted fades by this factor a step (half in about 70 steps): a fit that came out too
#: large cannot hold a learner's batch up for good, and as the batch shrinks again the
#: sizes it visits are measured afresh.
COST_FADE = 0.99


class StepCost:
    """The part of this learner's step time that no item adds, in items' worth.

    A step of ``b`` items takes about ``fixed + per_item x b`` seconds. Proportional
    pacing (``fixed = 0``) is what a learner assumes until its own steps show otherwise:
    a least-squares line through its last :data:`COST_WINDOW` step times, once they
    include batches far enough apart (:data:`COST_SPREAD`), fitted again without the steps
    far above it (:data:`COST_OUTLIER`). Only what the steps show beyond their noise
    counts: :attr:`items` is the fixed cost three standard errors below the fitted one (0
    if that is not above 0) over the cost of an item three standard errors above, so a
    proportional learner whose step times jitter is not taken for one with a fixed cost.
    Steps whose time falls as the batch grows (a GPU slowing while its batch shrinks to
    follow) show nothing, and the last fit fades (:data:`COST_FADE`). A fixed part and
    items that cost nothing to see make :attr:`items` twice the largest batch measured.
    """

    def __init__(self) -> None:
        self._steps: deque[tuple[int, float]] = deque(maxlen=COST_WINDOW)
        self.items = 0.0

    def stepped(self, samples: int, seconds: float) -> None:
        """Count one step of ``samples`` items that took ``seconds``."""
        if samples > 0 and 0.0 <= seconds < math.inf:
            self._steps.append((samples, seconds))
        fit = self._fit()
        if fit is None:
            self.items *= COST_FADE
            return
        fixed, per_item, fixed_error, per_item_error = fit
        least_fixed = fixed - 3 * fixed_error
        most_per_item = per_item + 3 * per_item_error
        # At most twice the window's largest batch: a learner never takes more than that
        # for its fixed part, and a fit that overshot fades back from there.
        most = 2.0 * max(b for b, _ in self._steps)
        if least_fixed <= 0:
            self.items = 0.0
        elif most_per_item <= 0:  # a fixed part, and items that cost nothing to see
            self.items = most
        else:
            self.items = min(most, least_fixed / most_per_item)

    def _fit(self) -> tuple[float, float, float, float] | None:
        """The line ``fixed + per_item x b`` through the window's steps, less those far
        above it, and the standard errors of both; ``None`` while its batches are too
        close together to tell them apart, or their line falls as the batch grows."""
        steps = list(self._steps)
        batches = [b for b, _ in steps]
        if len(steps) < 3 or max(batches) < COST_SPREAD * min(batches):
            return None
        kept = _below_the_stalls(steps)
        batches = [b for b, _ in kept]
        if len(kept) < 3 or max(batches) < COST_SPREAD * min(batches):
            return None
        line = _least_squares(kept)
        if line is None:
            return None
        mean_t = sum(t for _, t in kept) / len(kept)
        fixed, per_item, residual, spread, mean_b = line
        tiny = 1e-9 * mean_t / mean_b  # what rounding leaves of a flat line's slope
        if per_item < -tiny:
            return None  # slower as its batch shrank: the GPU's speed moved, not a cost
        n = len(kept)
        return (
            fixed,
            per_item,
            math.sqrt(residual * (1 / n + mean_b * mean_b / spread)),
            math.sqrt(residual / spread),
        )


def _least_squares(
    steps: list[tuple[int, float]],
) -> tuple[float, float, float, float, float] | None:
    """The least-squares line ``fixed + per_item x b`` through ``steps``: ``fixed``,
    ``per_item``, the residuals' variance, the batches' sum of squares about their mean,
    and that mean; ``None`` for one batch size only."""
    n = len(steps)
    mean_b = sum(b for b, _ in steps) / n
    mean_t = sum(t for _, t in steps) / n
    spread = sum((b - mean_b) * (b - mean_b) for b, _ in steps)
    if spread <= 0:
        return None
    per_item = sum((b - mean_b) * (t - mean_t) for b, t in steps) / spread
    fixed = mean_t - per_item * mean_b
    residual = sum((t - fixed - per_item * b) * (t - fixed - per_item * b) for b, t in steps)
    return fixed, per_item, residual / (n - 2), spread, mean_b


def _below_the_stalls(steps: list[tuple[int, float]]) -> list[tuple[int, float]]:
    """``steps`` less those far above the rest (:data:`COST_OUTLIER`).

    A stall only ever lengthens a step, and the stalls can all fall at one batch (the one a
    learner keeps), where a least-squares line would bend toward them. So the line they are
    judged against runs through each batch's lower quartile, weighted by its steps: a
    quarter of a batch's steps need to be clean. A step time's jitter scales the quartiles
    all alike, which moves no batch's share of the line.
    """
    by_batch: dict[int, list[float]] = {}
    for b, t in steps:
        by_batch.setdefault(b, []).append(t)
    quartiles = []
    for b, times in by_batch.items():
        times.sort()
        quartiles.extend([(b, times[(len(times) - 1) // 4])] * len(times))
    line = _least_squares(quartiles)
    if line is None:
        return steps
    above = [t - line[0] - line[1] * b for b, t in steps]
    middle = statistics.median(above)
    deviation = statistics.median(abs(r - middle) for r in above) * 1.4826  # a normal's sd
    mean_t = sum(t for _, t in steps) / len(steps)
    limit = middle + COST_OUTLIER * deviation + 1e-9 * mean_t  # exact steps keep every one
    return [step for step, r in zip(steps, above, strict=True) if r <= limit]
