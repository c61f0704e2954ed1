"""How fast each learner trains, and what that decides: its batch and its deltas' weight.

Each learner measures its own pace on the training thread: seconds per sample, smoothed over
its last steps (:class:`Pace`). It publishes that pace with its batch size and ``every`` in
its ledger entry at each exchange, so every learner that reads the head sees everyone's
(:class:`GroupPace`). From that one record, with no coordinator:

* **Batch** (:meth:`GroupPace.batch_for`). A learner takes ``batch_size x fastest / own``
  seconds-per-sample, at least 1: the fastest learner takes ``batch_size``, one half as
  fast half of it, so every learner steps at the fastest one's pace and the group makes
  one step of the *group batch* (the sum of their batches) per step time, as lockstep
  training with batches in proportion to speed would, without waiting for anyone. A step
  also has a cost that no item adds (kernel launches, the optimizer's update, a loader's
  round trip): each learner measures its own (``gradientmail._exchange.step_cost``), and
  a learner whose fixed cost is more than half the fastest one's step time is not shrunk
  below the batch whose items cost as much as that fixed part: shrinking further would
  cut its items by far more than its step time (at most half of it).
* **Weight** (:meth:`GroupPace.share`). A delta made of steps of ``b`` samples each moves
  the shared parameters by ``b / group batch`` of itself: its share of the samples the
  group trains on per step time. In one step time the shared model then moves by the
  sample-weighted mean of everyone's step, as one step on the group batch would; a
  learner alone keeps all of its progress, and ``N`` equal learners average theirs.
* **Gain** (:meth:`GroupPace.noise`, ``gradientmail._exchange.noise``). With an adaptive
  optimizer a small batch's step carries less signal than its share of the samples; the
  gain, fitted from the gradients' mean squares the learners publish at their batches,
  raises its weight to what one step on the group batch would carry.
* **Expected staleness** (:meth:`GroupPace.expected_staleness`): how many other learners'
  exchanges land during one of this learner's, at these paces. Only a delta staler than
  that is damped.

Rules only, no I/O; the clock is passed in, so tests drive it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from gradientmail._exchange.noise import noise_fit
from gradientmail._exchange.step_cost import StepCost

if TYPE_CHECKING:
    import torch

    from gradientmail._exchange.gradients import GradientMeter

__all__ = ["GroupPace", "LearnerPace", "Pace", "Progress", "Work"]

#: How much of the newest step interval enters the smoothed pace (about the last ten steps).
SMOOTHING = 0.2
#: A step interval longer than this many times the smoothed one (an evaluation, a
#: checkpoint, a pause) counts as this many: a slowdown still shows within a few steps.
OUTLIER = 4.0


@dataclass(frozen=True)
class LearnerPace:
    """One learner's published pace: its batch, seconds per sample, and ``every``; and its
    gradients' smoothed mean square at that batch (0: not measured)."""

    batch: int
    seconds_per_sample: float
    every: int
    grad_square: float = 0.0

    @property
    def step_seconds(self) -> float:
        """Seconds one of its steps takes at its batch."""
        return self.batch * self.seconds_per_sample

    @property
    def exchange_seconds(self) -> float:
        """Seconds between two of its exchanges: ``every`` steps."""
        return self.step_seconds * max(1, self.every)

    @property
    def measured(self) -> bool:
        return self.batch > 0 and self.seconds_per_sample > 0


class Pace:
    """This learner's seconds per sample, measured between consecutive steps, and its
    fixed step cost (:attr:`cost`).

    Args:
        clock: a monotonic clock in seconds (``time.monotonic`` unless a test drives one).
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._last: float | None = None
        self.seconds_per_sample = 0.0
        self.cost = StepCost()

    def stepped(self, samples: int) -> None:
        """Count one step of ``samples`` samples, ended now."""
        now = self._clock()
        if self._last is not None and samples > 0:
            took = max(0.0, now - self._last)
            self.cost.stepped(samples, took)  # whole: its fit leaves stalls out itself
            interval = took / samples
            if self.seconds_per_sample <= 0:
                self.seconds_per_sample = interval
            else:
                interval = min(interval, OUTLIER * self.seconds_per_sample)
                self.seconds_per_sample += SMOOTHING * (interval - self.seconds_per_sample)
        self._last = now

    def restart(self) -> None:
        """Forget the last step's end (after a pause the training loop announced)."""
        self._last = None


class GroupPace:
    """Everyone's pace as one head's ledger records it, with this learner's own newest.

    Args:
        paces: each active learner's published pace, by learner id (unmeasured ones are
            left out: they count from their first exchange with a measurement).
        me: this learner's id; ``mine`` its pace now, which replaces what it published.
    """

    def __init__(self, paces: dict[str, LearnerPace], me: str, mine: LearnerPace) -> None:
        self.me = me
        self.paces = {k: v for k, v in paces.items() if v.measured and k != me}
        if mine.measured:
            self.paces[me] = mine
        self._mine = mine

    @classmethod
    def alone(cls, me: str, mine: LearnerPace) -> GroupPace:
        return cls({}, me, mine)

    def fastest_seconds_per_sample(self) -> float | None:
        return min((p.seconds_per_sample for p in self.paces.values()), default=None)

    def batch_for(self, batch_size: int, fixed_items: float = 0.0) -> int:
        """This learner's batch: the items it can train on in the fastest learner's step
        time at ``batch_size``, but not below ``fixed_items`` (its :class:`StepCost`).

        With steps that cost in proportion to their items (``fixed_items = 0``) that is
        ``batch_size`` scaled by its speed over the fastest's. Otherwise a step of ``x``
        items takes ``(x + fixed_items) / (b + fixed_items)`` of its step at its batch
        ``b`` now, which gives the ``x`` that fits. Below ``fixed_items`` more than half
        of each step would be the fixed part: the learner gives up that little freshness
        and keeps its items.
        """
        fastest = self.fastest_seconds_per_sample()
        mine = self.paces.get(self.me)
        if fastest is None or mine is None:
            return batch_size
        target = batch_size * fastest
        fixed = min(fixed_items, float(batch_size))
        fits = target * (mine.batch + fixed) / mine.step_seconds - fixed
        return max(1, min(batch_size, round(max(fits, fixed))))

    def group_batch(self) -> float:
        """Samples the group trains on in one step time of its fastest-stepping learner."""
        steps = [p.step_seconds for p in self.paces.values()]
        if not steps:
            return float(max(1, self._mine.batch))
        shortest = min(steps)
        return sum(p.batch / p.step_seconds for p in self.paces.values()) * shortest

    def share(self, samples_per_step: float) -> float:
        """The weight of a delta whose steps took ``samples_per_step`` samples each."""
        return min(1.0, max(0.0, samples_per_step) / self.group_batch())

    def noise(self) -> tuple[float, float] | None:
        """The gradients' signal and noise (``|G|^2, S``; ``gradientmail._exchange.noise``)
        fitted from the mean squares published by the learners that measure them; ``None``
        unless this learner measures its own and they trained on two batch sizes or more."""
        mine = self.paces.get(self.me)
        if mine is None or mine.grad_square <= 0:
            return None
        return noise_fit((p.batch, p.grad_square) for p in self.paces.values())

    def expected_staleness(self) -> float:
        """Other learners' exchanges expected to land during one exchange interval of this
        learner: 0 alone, ``N - 1`` for ``N`` learners exchanging at the same rate."""
        mine = self.paces.get(self.me)
        if mine is None:
            return float(len(self.paces))
        own_rate = 1.0 / mine.exchange_seconds
        return sum(
            1.0 / p.exchange_seconds / own_rate for name, p in self.paces.items() if name != self.me
        )

    def learners(self) -> Iterable[str]:
        return self.paces.keys()


class Progress(NamedTuple):
    """What a delta covers: the items of one of its steps (on average), this learner's pace
    when it was handed over, and its gradients' smoothed mean square then (a tensor on
    their device, read by the exchange thread: the training thread never waits for it)."""

    samples_per_step: float
    pace: LearnerPace
    grad_square: torch.Tensor | None = None

    def published(self) -> LearnerPace:
        """The pace to publish, with the gradients' mean square read (exchange thread)."""
        if self.grad_square is None:
            return self.pace
        square = float(self.grad_square)
        if not 0 < square < math.inf:  # a step of NaN or infinite gradients: nothing to fit
            square = 0.0
        pace = self.pace
        return LearnerPace(pace.batch, pace.seconds_per_sample, pace.every, square)


class Work:
    """How much one learner trains on per step, from its pace and the others' (training
    thread only): the batch it takes, and what its next delta covers.

    Args:
        batch_size: the fastest learner's batch (``Exchange(batch_size=)``); ``None``: the
            loop sizes its own batches, and a step counts as one item.
        learner: this learner's id.
        every: its steps per exchange, published with its pace.
        clock: monotonic seconds (``time.monotonic``).
        meter: what measures this learner's gradients for the gain; ``None``: no gain.
    """

    def __init__(
        self,
        batch_size: int | None,
        learner: str,
        every: int,
        clock: Callable[[], float] = time.monotonic,
        meter: GradientMeter | None = None,
    ) -> None:
        self.batch_size = batch_size
        self.meter = meter
        self.learner, self.every = learner, every
        self.clock = clock
        self.pace = Pace(clock)
        #: The other active learners' paces, from the last head this learner's exchange read.
        self.others: dict[str, LearnerPace] = {}
        self.batch = batch_size or 1
        self._samples = 0
        self._steps = 0

    def stepped(self) -> None:
        """One step of :attr:`batch` items ended now; size the next."""
        self.pace.stepped(self.batch)
        self._samples += self.batch
        self._steps += 1
        if self.batch_size is not None:
            self.batch = GroupPace(self.others, self.learner, self.mine()).batch_for(
                self.batch_size, self.pace.cost.items
            )

    def group_batch(self) -> float:
        """Items the group trains on per step time, from the paces last read (see
        :meth:`GroupPace.group_batch`): this learner's batch while it is alone."""
        return GroupPace(self.others, self.learner, self.mine()).group_batch()

    def mine(self) -> LearnerPace:
        """This learner's pace as its ledger entry publishes it."""
        return LearnerPace(self.batch, self.pace.seconds_per_sample, self.every)

    def next_step_at(self) -> float:
        """When the next step should end, at this learner's pace (on :attr:`clock`)."""
        return self.clock() + self.batch * self.pace.seconds_per_sample

    def handed_over(self) -> Progress:
        """What the steps since the last hand-over cover; counting starts again."""
        per_step = self._samples / self._steps if self._steps else float(self.batch)
        self._samples = self._steps = 0
        square = None if self.meter is None else self.meter.latest()
        return Progress(per_step, self.mine(), square)
