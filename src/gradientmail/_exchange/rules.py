"""Outer rules: how one learner's progress moves the shared parameters.

A rule sees the shared state (the parameters, then any buffers of its own), one learner's
progress ``delta = local - anchor`` already weighted (:class:`OuterStep`), and the number
of learners active now. It returns the new state, and says what fraction of a delta it
applies at once (``step``), which bounds the weight. Rules are pure: no I/O, no clock.

Two rules ship:

* :class:`Average` (the default). ``shared += lr * delta`` with no momentum, where ``lr``
  is by default the delta's *sample share*: the items of one of its steps over the items
  the whole group trains on in one step time (``gradientmail._exchange.pace``). Applied to
  each learner's delta as it arrives, this is federated averaging made asynchronous
  (FedAsync, Xie et al. 2019; FedBuff's server step without the buffer), weighted by
  samples as Decoupled DiLoCo merges by tokens: in one step time the shared model moves by
  the sample-weighted mean of everyone's step, as one lockstep step on the group's batch
  would, and equal learners average. A delta only adds a term, which cannot accumulate as
  momentum would.
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
    """``shared += lr * delta``; ``lr`` defaults to the delta's sample share (``1 / active
    learners`` among equal ones). No state."""

    lr: float | None = None
    name: str = "average"
    parts: int = 1

    @property
    def averages(self) -> bool:
        """Whether the step divides among the active learners (then by samples instead)."""
        return self.lr is None

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


def staleness_damping(staleness: int, expected: float, exponent: float) -> float:
    """``((1 + expected) / (1 + staleness)) ** exponent``, at most 1: a delta no staler than
    the learners' paces make normal keeps its whole weight, and a staler one less."""
    return float(min(1.0, ((1 + max(0.0, expected)) / (1 + max(0, staleness))) ** exponent))


@dataclass(frozen=True)
class OuterStep:
    """How one delta moves the shared parameters: the rule, its share, and staleness.

    A delta's weight is its sample share (for a rule that averages: the default
    :class:`Average`; :class:`DelayedNesterov` keeps its own ``1 / N``), times a
    damping for staleness beyond what the learners' paces make normal. With ``N`` equal
    learners exchanging in turn, ``N - 1`` others apply between two exchanges of one
    learner, and such a delta keeps its whole share, ``1 / N``; so does a fresher one (its
    progress is not overlapped by anyone's); one staler than normal is damped by
    ``((1 + normal) / (1 + tau)) ** staleness``, and dropped past ``max_staleness``
    versions. The product never lets a delta move the shared parameters by more than its
    own size. ``staleness=None`` turns the damping off: with ``Average(lr=1.0)`` an
    exchange then moves the shared parameters by exactly the learner's progress.
    """

    rule: OuterRule
    staleness: float | None
    max_staleness: int | None

    def drops(self, tau: int) -> bool:
        """Whether a delta ``tau`` versions stale is dropped."""
        return self.max_staleness is not None and tau > self.max_staleness

    def weight(self, tau: int, active: int, share: float, expected: float) -> float:
        """The weight of a delta ``tau`` versions stale among ``active`` learners, whose
        sample share is ``share`` where ``expected`` versions are normal staleness."""
        weight = 1.0
        if getattr(self.rule, "averages", False):
            weight = share * max(1, active)  # the rule divides by ``active``: by samples instead
        if self.staleness is not None:
            weight *= staleness_damping(tau, expected, self.staleness)
        return min(weight, 1.0 / self.rule.step(active))
