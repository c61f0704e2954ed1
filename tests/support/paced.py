"""Learners of the recipe for unequal GPUs on driven clocks: exact paces, batches, weights.

Paces (about a millisecond an item) come from per-learner fake clocks, so every batch and
weight is exact: with paces 1, 2, 4 and 4 and ``batch_size=4``, the learners take 4, 2, 1
and 1 items a step, the group trains on 8 a step time, and their deltas weigh 1/2, 1/4, 1/8
and 1/8.
"""

from __future__ import annotations

from contextlib import ExitStack
from functools import partial
from typing import Any

import torch

from gradientmail import Mailbox
from gradientmail._exchange.pace import Pace
from gradientmail.torch import Exchange
from tests.support.clock import FakeClock
from tests.support.exchange_workers import SHAPE, initial, integer_model
from tests.support.polling import wait_until

UNIT = 2.0**-10  # about a millisecond a step: exact in binary, so every weight is exact
PACES = {"a": UNIT, "b": 2 * UNIT, "c": 4 * UNIT, "d": 4 * UNIT}
BATCHES = {"a": 4, "b": 2, "c": 1, "d": 1}
#: The positions of an item fed through a learner's forward: never a batch size here.
WIDTH = 7
SHARES = {"a": 0.5, "b": 0.25, "c": 0.125, "d": 0.125}


class Paced:
    """One learner: an exact Exchange whose pace is a fake clock moved by each step."""

    def __init__(self, box: Mailbox, name: str, pace: float, **options: Any) -> None:
        self.name, self.pace = name, pace
        self.model = integer_model()
        self.exchange = Exchange(
            self.model,
            mailbox=box,
            learner_id=name,
            batch_size=4,
            staleness=None,
            max_staleness=None,
            fragment_bytes=16,
            **options,
        )
        self.clock = FakeClock(start=0.0)
        self.exchange._work.pace = Pace(self.clock)
        self.total = torch.zeros_like(initial())

    def step(self, size: int = 0, took: int | None = None) -> None:
        """One step of ``exchange.batch_size`` items that moves every parameter by ``-size``,
        waiting until its exchange is applied (one exchange a step, in turn). ``took``: the
        step's one training forward of the model carries that many items (the clock moves
        by the batch asked all the same, so the paces stay put), as rows of ``WIDTH``
        positions: no batch asked is ever read off the other dimension by chance."""
        batch = self.exchange.batch_size
        if took is not None:
            self.model(torch.zeros(took, WIDTH, SHAPE[1]))
        with torch.no_grad():
            for p in self.model.parameters():
                p -= size
        self.total -= size
        self.clock.advance(self.pace * batch)  # a step takes pace seconds per item
        done = self.exchange.stats.exchanges
        self.exchange.step()
        wait_until(partial(applied, self.exchange, done), 60, f"{self.name}'s exchange")
        wait_until(self.exchange._handoff.settled, 60, f"{self.name}'s exchange thread")


def applied(exchange: Exchange, than: int) -> bool:
    return exchange.stats.exchanges > than or exchange._handoff.error is not None


def learners(box: Mailbox, stack: ExitStack, **options: Any) -> list[Paced]:
    group = [Paced(box, name, pace, **options) for name, pace in PACES.items()]
    for learner in group:
        stack.enter_context(learner.exchange)
    return group


def settle_paces(group: list[Paced]) -> None:
    """Steps that change nothing, until every learner knows everyone's pace."""
    for _ in range(4):
        for learner in group:
            learner.step()
    assert {x.name: x.exchange.batch_size for x in group} == BATCHES
