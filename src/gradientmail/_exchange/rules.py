"""Outer rules: how one learner's progress moves the shared parameters.

A rule sees the shared state (the parameters, then any buffers of its own), one learner's
progress ``delta = local - anchor`` already weighted for staleness, and the number of
learners active now. It returns the new state, and says what fraction of a delta it
applies at once (``step``), which bounds the staleness weight. Rules are pure: no I/O, no
clock.

Two rules ship:

* :class:`Average` (the default). ``shared += lr * delta`` with ``lr = 1 / active`` unless
  given, and no momentum. Applied to each learner's delta as it arrives, this is federated
  averaging made asynchronous (FedAsync, Xie et al. 2019; FedBuff's server step without the
  buffer): with equal speeds it moves the shared model by the learners' mean progress, and
  a stale delta only adds a damped term, which cannot accumulate as momentum would. With
  :class:`OuterStep`'s default weight the step becomes ``1 / (1 + tau)``, staleness-aware
  asynchronous SGD (Zhang et al. 2016).
* :class:`DelayedNesterov`, after Liu et al. 2024 ("Asynchronous Local-SGD Training for
  Language Modeling"): each delta is applied at once as ``lr * delta / N``, and the
  Nesterov momentum buffer is updated only once every ``N`` deltas from their mean, so that
  momentum is built from a round of learners rather than from each stale delta.

Plain Nesterov momentum applied to every delta (DiLoCo's outer step, run asynchronously)
is not offered: each stale delta would be amplified by ``1 / (1 - momentum)`` on top of the
deltas already applied since its anchor, and in our trials it diverged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import torch

from gradientmail._errors import ConfigurationError

#: A version's state: the parameters, then any buffers of the rule's own, flat fp32.
State = list[torch.Tensor]
#: A rule's small state between deltas, stored in the shared model's head.
RuleState = dict[str, Any]


class OuterRule(Protocol):
    """What an outer rule provides. ``parts`` is the number of buffers in its state."""

    @property
    def name(self) -> str:
        """The rule's name, recorded in the shared model's layout."""
        ...

    @property
    def parts(self) -> int:
        """How many buffers of the parameters' size a version stores (1: parameters only)."""
        ...

    def step(self, active: int) -> float:
        """The fraction of a delta applied at once among ``active`` learners (before any
        momentum); the staleness weight never makes a delta move more than its own size."""
        ...

    def apply(
        self, state: State, delta: torch.Tensor, active: int, rule_state: RuleState
    ) -> tuple[State, RuleState]:
        """The new state (the parameters first) and the rule's new small state."""
        ...


def _check_lr(lr: float | None, what: str) -> float | None:
    if lr is None:
        return None
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not 0 < lr < float("inf"):
        raise ConfigurationError(f"{what} must be a positive finite number, not {lr!r}")
    return float(lr)


@dataclass(frozen=True)
class Average:
    """``shared += lr * delta``; ``lr`` defaults to ``1 / active learners``. No state."""

    lr: float | None = None
    name: str = "average"
    parts: int = 1

    def __post_init__(self) -> None:
        _check_lr(self.lr, "outer_lr")

    def step(self, active: int) -> float:
        return self.lr if self.lr is not None else 1.0 / max(1, active)

    def apply(
        self, state: State, delta: torch.Tensor, active: int, rule_state: RuleState
    ) -> tuple[State, RuleState]:
        return [state[0] + self.step(active) * delta], rule_state


@dataclass(frozen=True)
class DelayedNesterov:
    """Delayed Nesterov momentum: momentum updated once every ``delay`` deltas.

    State: the parameters, the momentum buffer ``m`` and the sum ``acc`` of the deltas since
    the last momentum update. On each delta ``d`` (``N = delay``, or the active learners)::

        acc += d
        every N-th delta:  m = momentum * m + acc / N;  shared += lr * (momentum * m + d / N)
                           acc = 0
        otherwise:         shared += lr * d / N

    Each version then stores three times the parameters, and an exchange moves three times
    the bytes of :class:`Average`.
    """

    lr: float = 0.7
    momentum: float = 0.9
    delay: int | None = None
    name: str = "delayed-nesterov"
    parts: int = 3

    def __post_init__(self) -> None:
        _check_lr(self.lr, "DelayedNesterov lr")
        if not 0 <= self.momentum < 1:
            raise ConfigurationError(f"momentum must be in [0, 1), not {self.momentum!r}")
        if self.delay is not None and (isinstance(self.delay, bool) or self.delay < 1):
            raise ConfigurationError(f"delay must be a positive integer, not {self.delay!r}")

    def step(self, active: int) -> float:
        return self.lr / (self.delay or max(1, active))

    def apply(
        self, state: State, delta: torch.Tensor, active: int, rule_state: RuleState
    ) -> tuple[State, RuleState]:
        params, momentum_buffer, acc = state
        n = self.delay or max(1, active)
        acc = acc + delta
        count = int(rule_state.get("count", 0)) + 1
        if count >= n:
            momentum_buffer = self.momentum * momentum_buffer + acc / n
            params = params + self.lr * (self.momentum * momentum_buffer + delta / n)
            acc = torch.zeros_like(acc)
            count = 0
        else:
            params = params + self.lr * delta / n
        return [params, momentum_buffer, acc], {"count": count}


def resolve(outer: str | OuterRule, outer_lr: float | None) -> OuterRule:
    """The rule named by ``outer`` (``"average"``, ``"delayed-nesterov"``) or given as one."""
    if outer == "average":
        return Average(lr=outer_lr)
    if outer == "delayed-nesterov":
        return DelayedNesterov() if outer_lr is None else DelayedNesterov(lr=outer_lr)
    if isinstance(outer, str):
        raise ConfigurationError(
            f"outer={outer!r} is not a rule; use 'average', 'delayed-nesterov', or an object "
            "with name, parts and apply() (gradientmail.torch.Average, DelayedNesterov)"
        )
    if outer_lr is not None:
        raise ConfigurationError(
            "outer_lr applies to the named rules only; give the rule object its own lr"
        )
    return outer


def staleness_weight(staleness: int, active: int, exponent: float) -> float:
    """``((1 + staleness) / active) ** -exponent``: 1 at the normal staleness of ``active``
    learners exchanging in turn (``active - 1``), more for a fresher delta, less for a
    staler one."""
    return float(((1 + staleness) / max(1, active)) ** -exponent)


@dataclass(frozen=True)
class OuterStep:
    """How one delta moves the shared parameters: the rule, and how staleness weights it.

    ``staleness`` is the weight's exponent (``None``: no weight); a delta staler than
    ``max_staleness`` versions is dropped (``None``: never).

    The weight is relative to the normal staleness: with ``N`` active learners exchanging
    in turn, ``N - 1`` others apply between two exchanges of one learner, and such a delta
    gets the rule's own step (``1 / N`` for the default average). A fresher delta carries
    progress that no one else's delta overlaps, so it gets more, and a staler one less;
    the product never exceeds 1, so no delta moves the shared parameters by more than its
    own size. With the default exponent 1 and the default average, a delta ``tau``
    versions stale moves them by ``delta / (1 + tau)``: a learner alone keeps all of its
    progress, and equal learners in turn average theirs.
    """

    rule: OuterRule
    staleness: float | None
    max_staleness: int | None

    def drops(self, tau: int) -> bool:
        """Whether a delta ``tau`` versions stale is dropped."""
        return self.max_staleness is not None and tau > self.max_staleness

    def weight(self, tau: int, active: int) -> float:
        """The weight of a delta ``tau`` versions stale among ``active`` learners."""
        if self.staleness is None:
            return 1.0  # no weight: the rule's step exactly, whatever it is
        weight = staleness_weight(tau, active, self.staleness)
        return min(weight, 1.0 / self.rule.step(active))
