"""The noise gain: averaged steps of an adaptive optimizer, raised to one step on the group's batch.

An adaptive optimizer (Adam, AdamW, RMSprop, ...) divides each step by the root of its
gradients' running second moment. Where a batch's gradient is mostly noise, that moment is
mostly the noise's variance over the batch, so a step on ``b`` items carries signal in
proportion to ``sqrt(b)`` while its noise keeps the same size. Averaged by samples, the
deltas of learners on small batches then move the shared model by less signal than one
step on the group's batch would: at batches 16/8/8/4, about 0.54 of it. Where the gradient
is mostly signal, every step has the same size whatever its batch, and averaging is right.

The gain tells the two apart from the learners' own gradients. The mean square of a
gradient on ``b`` items is ``|G|^2 + S / b``: the true gradient's square, and the per-item
noise ``S`` (McCandlish et al. 2018, "An Empirical Model of Large-Batch Training"; the loss
is a mean over the batch's items, PyTorch's default reduction). Each learner measures its
gradients' smoothed mean square at its own batch (``gradients.GradientMeter``) and
publishes it with its pace. Learners at different batches give points on that line, and the fit
(:func:`noise_fit`) gives its two terms. A delta of steps on ``b`` items is then weighted by
its sample share times::

    gain = sqrt((|G|^2 + S / b) / (|G|^2 + S / B))

for the group batch ``B``: the root of AdaScale's gain (Johnson et al. 2020), for a method
that divides by the root of the second moment. It is 1 where the gradient is all signal,
``sqrt(B / b)`` where it is all noise, and in between otherwise; then, in one step time,
the shared model moves as one step on ``B`` items would in both limits. With fewer than two
batch sizes among the learners that measure (one learner, or equal speeds), nothing is
known and the gain is 1.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

__all__ = ["noise_fit", "noise_gain", "noise_scale"]


def noise_fit(points: Iterable[tuple[float, float]]) -> tuple[float, float] | None:
    """``(|G|^2, S)`` fitted by least squares to ``(batch, mean square)`` points in ``1 /
    batch``; ``None`` unless at least two batch sizes have a positive, finite mean square."""
    xs, ys = [], []
    for batch, square in points:
        if batch > 0 and 0 < square < math.inf:
            xs.append(1.0 / batch)
            ys.append(square)
    if len(set(xs)) < 2:
        return None
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    noise = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / spread
    return mean_y - noise * mean_x, noise


def noise_gain(fit: tuple[float, float] | None, batch: float, group_batch: float) -> float:
    """The gain of a delta of steps on ``batch`` items among a group on ``group_batch``:
    ``sqrt((|G|^2 + S / batch) / (|G|^2 + S / group_batch))``, from 1 (no fit, no noise, or
    a batch as large as the group's) to ``sqrt(group_batch / batch)`` (only noise)."""
    if fit is None or not 0 < batch < group_batch:
        return 1.0
    signal, noise = fit
    if noise <= 0:  # the squares do not fall with the batch: no noise measured
        return 1.0
    if signal <= 0:  # all noise (a fit at or below zero): the formula's limit
        return math.sqrt(group_batch / batch)
    # With 0 < batch < group_batch and both terms positive, this lies strictly between 1
    # and sqrt(group_batch / batch): no clamp is needed.
    return math.sqrt((signal + noise / batch) / (signal + noise / group_batch))


def noise_scale(fit: tuple[float, float] | None) -> float | None:
    """The noise scale ``S / |G|^2`` (McCandlish et al.'s ``B_simple``): the batch beyond
    which more items a step help little. ``None`` without a fit, ``inf`` for all noise, 0
    for none."""
    if fit is None:
        return None
    signal, noise = fit
    if noise <= 0:
        return 0.0
    return math.inf if signal <= 0 else noise / signal
