"""The recipe for unequal learners: batches sized to speed, deltas weighted by samples, and
the freshest version adopted, each through a real Exchange on a driven clock.

Paces (about a millisecond an item) come from per-learner fake clocks, so every batch and
weight is exact: with paces 1, 2, 4 and 4 and ``batch_size=4``, the learners take 4, 2, 1
and 1 items a step, the group trains on 8 a step time, and their deltas weigh 1/2, 1/4, 1/8
and 1/8: integer deltas that are multiples of 8 then sum exactly, so a delta lost, doubled
or misweighted shows.
"""

from __future__ import annotations

import threading
from contextlib import ExitStack
from functools import partial
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from gradientmail import ConfigurationError, Mailbox, from_url  # noqa: E402
from gradientmail.torch import Exchange  # noqa: E402
from tests.support.exchange_workers import flat, initial, integer_model, shared_now  # noqa: E402
from tests.support.paced import (  # noqa: E402
    BATCHES,
    PACES,
    SHARES,
    UNIT,
    applied,
    learners,
    settle_paces,
)
from tests.support.polling import wait_until  # noqa: E402
from tests.support.rigs import Rig  # noqa: E402


def test_the_group_batch_is_the_learners_batches_together_and_the_own_batch_alone() -> None:
    """What the docs scale the learning rate by: alone, its own batch; with everyone's
    pace known, the items the group trains on per step time (4 + 2 + 1 + 1)."""
    box = from_url("memory://recipe-group-batch")
    with ExitStack() as stack:
        group = learners(box, stack)
        assert group[0].exchange.group_batch == 4, "alone (nobody's pace read yet)"
        settle_paces(group)
        assert {x.name: x.exchange.group_batch for x in group} == dict.fromkeys(PACES, 8)


@pytest.mark.parametrize("rig_name", ["rig_memory", "rig_file"])
def test_deltas_weighted_by_samples_are_each_applied_exactly_once(
    request: pytest.FixtureRequest, rig_name: str
) -> None:
    rig: Rig = request.getfixturevalue(rig_name)
    box = rig.fresh()
    with ExitStack() as stack:
        group = learners(box, stack)
        settle_paces(group)
        assert torch.equal(shared_now(box), initial())
        for round_ in range(3):
            for i, learner in enumerate(group):
                learner.step(size=8 * (i + 1 + round_))
    expected = initial() + sum(SHARES[x.name] * x.total for x in group)
    assert torch.equal(shared_now(box), expected)


def test_a_learner_that_slows_takes_a_smaller_batch_and_one_that_speeds_up_a_larger() -> None:
    box = from_url("memory://recipe-resize")
    with ExitStack() as stack:
        group = learners(box, stack)
        settle_paces(group)
        a, b = group[0], group[1]
        a.pace = 6 * UNIT  # another job landed on the fastest GPU: now the slowest but for c, d
        for _ in range(12):
            for learner in group:
                learner.step()
        assert b.exchange.batch_size == 4, "b is the fastest now: it takes batch_size"
        assert a.exchange.batch_size == round(4 * 2.0 / 6.0)
        a.pace = UNIT
        for _ in range(20):
            for learner in group:
                learner.step()
        assert {x.name: x.exchange.batch_size for x in group} == BATCHES


class HeldRefresh:
    """Holds ``exchange``'s first read of a newer version (the exchange thread's refresh,
    after an exchange is published) until :attr:`release` is set."""

    def __init__(self, exchange: Exchange) -> None:
        applier = exchange._handoff.applier
        self.reached, self.release = threading.Event(), threading.Event()
        original = applier.refresh

        def refresh(than: int) -> Any:
            if not self.reached.is_set():
                self.reached.set()
                assert self.release.wait(60), "never released"
            return original(than)

        applier.refresh = refresh  # type: ignore[method-assign]


def two_learners(box: Mailbox) -> tuple[Exchange, Any]:
    a_model, b_model = integer_model(), integer_model()
    a = Exchange(a_model, mailbox=box, learner_id="a", outer_lr=1.0, staleness=None)
    b = Exchange(b_model, mailbox=box, learner_id="b", outer_lr=1.0, staleness=None)
    return a, (a_model, b, b_model)


def move(model: torch.nn.Module, size: int) -> None:
    with torch.no_grad():
        for p in model.parameters():
            p -= size


def test_a_learner_adopts_the_version_others_applied_after_its_exchange() -> None:
    """a's exchange lands as version 1; b applies version 2 before a's next step; a adopts
    version 2 (b's progress included), not the version its own exchange produced."""
    box = from_url("memory://recipe-fresh")
    a, (a_model, b, b_model) = two_learners(box)
    held = HeldRefresh(a)
    with a, b:
        move(a_model, 1)
        a.step()
        assert held.reached.wait(60), "a's exchange never read the head again"
        move(b_model, 10)
        b.step()
        wait_until(partial(applied, b, 0), 60, "b's exchange")
        held.release.set()
        wait_until(a._handoff.settled, 60, "a's read of the newer version")
        a.step()  # adopts, and hands over an exchange of what changed since: nothing
        assert torch.equal(flat(a_model), initial() - 1 - 10)
        wait_until(partial(applied, a, 1), 60, "a's second exchange")
    assert torch.equal(shared_now(box), initial() - 1 - 10), "b's delta applied once"


def test_a_newer_version_read_too_late_is_not_adopted_over_the_next_exchange() -> None:
    """a's step adopts its own exchange's version and hands over the next one while a's
    read of a newer version is held; that read, released, must not replace the next
    exchange's result: every delta is still applied exactly once."""
    box = from_url("memory://recipe-late-fresh")
    a, (a_model, b, b_model) = two_learners(box)
    held = HeldRefresh(a)
    with a, b:
        move(a_model, 1)
        a.step()
        assert held.reached.wait(60)
        move(b_model, 10)
        b.step()
        wait_until(partial(applied, b, 0), 60, "b's exchange")
        move(a_model, 100)
        a._handoff.next_step_at = 0.0
        a.step()  # adopts version 1 (the read is held) and hands over the next exchange
        held.release.set()  # the newer version is read only now
        wait_until(partial(applied, a, 1), 60, "a's second exchange")
        wait_until(a._handoff.settled, 60, "a's exchange thread")
        a.step()
    assert torch.equal(shared_now(box), initial() - 1 - 10 - 100)


def test_batch_size_must_be_a_positive_integer_the_same_for_every_learner() -> None:
    box = from_url("memory://recipe-refusals")
    for bad in (0, -4, 2.5, "16"):
        with pytest.raises(ConfigurationError, match="batch_size"):
            Exchange(integer_model(), mailbox=box, learner_id="x", batch_size=bad)  # type: ignore[arg-type]
    with Exchange(integer_model(), mailbox=box, learner_id="a", batch_size=16):
        other = Exchange(integer_model(), mailbox=box, learner_id="b", batch_size=32)
        with pytest.raises(ConfigurationError, match=r"batch_size=16.*32"):
            other.__enter__()


def test_batch_size_without_batch_size_given_names_the_option() -> None:
    box = from_url("memory://recipe-no-batch")
    with (
        Exchange(integer_model(), mailbox=box, learner_id="a") as exchange,
        pytest.raises(ConfigurationError, match=r"batch_size=\.\.\."),
    ):
        _ = exchange.batch_size
    with (
        Exchange(integer_model(), mailbox=box, learner_id="b") as exchange,
        pytest.raises(ConfigurationError, match=r"batch_size=\.\.\."),
    ):
        _ = exchange.group_batch
