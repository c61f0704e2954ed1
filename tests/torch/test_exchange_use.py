"""Mistakes a user makes with ``Exchange``: each is either made harmless or refused.

The exact integer model of ``test_exchange`` again: with ``outer_lr=1, staleness=None`` the
shared model moves by exactly each learner's progress, so training that was lost (or
applied twice) shows as a wrong integer.
"""

from __future__ import annotations

import threading
from functools import partial
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from gradientmail import ConfigurationError, from_url  # noqa: E402 - after the importorskip
from gradientmail.torch import Exchange  # noqa: E402
from tests.support.exchange_workers import (  # noqa: E402
    exact_exchange,
    initial,
    integer_model,
    shared_now,
)
from tests.support.polling import wait_until  # noqa: E402


def more_than(exchange: Exchange, done: int) -> bool:
    return exchange.stats.exchanges > done


def integer_sgd(model: Any) -> Any:
    """Plain SGD with lr 1: a step subtracts the gradient, which the test sets to integers."""
    return torch.optim.SGD(model.parameters(), lr=1.0)


def set_gradients(model: Any, value: float) -> None:
    for p in model.parameters():
        p.grad = torch.full_like(p, value)


# -- leaving exchanges every change, counted or not --------------------------------------------


def test_leaving_exchanges_training_that_no_step_call_counted() -> None:
    """A loop that forgot ``exchange.step()`` still hands its training over on leaving: the
    parameters are compared with the version adopted, not a step counter."""
    box = from_url("memory://exchange-forgotten-step")
    model = integer_model()
    with exact_exchange(model, box, "forgetful", every=50), torch.no_grad():
        for p in model.parameters():
            p -= 3
    assert torch.equal(shared_now(box), initial() - 3)


def test_leaving_without_any_change_applies_nothing() -> None:
    box = from_url("memory://exchange-no-change")
    with exact_exchange(integer_model(), box, "idle", every=1) as exchange:
        pass
    assert exchange.stats.exchanges == 0
    assert torch.equal(shared_now(box), initial())


# -- the optimizer hook ------------------------------------------------------------------------


def test_the_optimizer_hook_counts_each_optimizer_step_without_a_step_call() -> None:
    box = from_url("memory://exchange-hooked")
    model = integer_model()
    optimizer = integer_sgd(model)
    with Exchange(
        model,
        mailbox=box,
        learner_id="hooked",
        optimizer=optimizer,
        every=2,
        outer_lr=1.0,
        staleness=None,
    ) as exchange:
        for _ in range(4):
            set_gradients(model, 2)
            done = exchange.stats.exchanges
            optimizer.step()
            if exchange.stats.steps % 2 == 0:  # this step started an exchange: let it land
                wait_until(partial(more_than, exchange, done), 30, "the exchange")
        assert exchange.stats.steps == 4
        assert exchange.stats.exchanges >= 1, "the hooked steps started exchanges"
    assert torch.equal(shared_now(box), initial() - 8)


def test_with_gradient_accumulation_the_hook_counts_optimizer_steps_not_micro_batches() -> None:
    box = from_url("memory://exchange-accumulation")
    model = integer_model()
    optimizer = integer_sgd(model)
    with Exchange(model, mailbox=box, learner_id="acc", optimizer=optimizer, every=2) as exchange:
        for _ in range(3):
            optimizer.zero_grad()
            for _micro in range(4):
                loss = sum((p * 0.25).sum() for p in model.parameters())
                loss.backward()  # type: ignore[union-attr]
            optimizer.step()
        assert exchange.stats.steps == 3


def test_the_hook_goes_with_the_with_block() -> None:
    """After leaving, an optimizer step is the learner's own: it counts nowhere and raises
    nothing."""
    box = from_url("memory://exchange-hook-removed")
    model = integer_model()
    optimizer = integer_sgd(model)
    with Exchange(model, mailbox=box, learner_id="a", optimizer=optimizer) as exchange:
        pass
    set_gradients(model, 1)
    optimizer.step()
    assert exchange.stats.steps == 0


def test_step_is_refused_when_the_optimizer_counts_the_steps() -> None:
    box = from_url("memory://exchange-hooked-and-stepped")
    model = integer_model()
    optimizer = integer_sgd(model)
    with (
        Exchange(model, mailbox=box, learner_id="a", optimizer=optimizer) as exchange,
        pytest.raises(ConfigurationError, match=r"optimizer\.step\(\)"),
    ):
        exchange.step()


def test_an_optimizer_of_another_model_is_refused() -> None:
    box = from_url("memory://exchange-other-optimizer")
    other = integer_sgd(integer_model())
    with pytest.raises(ConfigurationError, match="none of this model's parameters"):
        Exchange(integer_model(), mailbox=box, learner_id="a", optimizer=other)
    with pytest.raises(ConfigurationError, match=r"torch\.optim\.Optimizer"):
        Exchange(integer_model(), mailbox=box, learner_id="a", optimizer="sgd")  # type: ignore[arg-type]


# -- the with block ----------------------------------------------------------------------------


def test_step_outside_the_with_block_is_refused() -> None:
    box = from_url("memory://exchange-not-entered")
    exchange = Exchange(integer_model(), mailbox=box, learner_id="a")
    with pytest.raises(ConfigurationError, match="with"):
        exchange.step()
    with exchange:
        exchange.step()
    with pytest.raises(ConfigurationError, match="with"):
        exchange.step()


def test_entering_the_same_exchange_twice_is_refused_and_never_hangs() -> None:
    box = from_url("memory://exchange-entered-twice")
    exchange = Exchange(integer_model(), mailbox=box, learner_id="a", every=1)
    with exchange:
        exchange.step()
    outcome: list[BaseException | None] = []

    def again() -> None:
        try:
            with exchange:
                exchange.step()
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - reported below
            outcome.append(exc)

    thread = threading.Thread(target=again, daemon=True)
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive(), "a second with block hung"
    assert isinstance(outcome[0], ConfigurationError), outcome
    assert "new Exchange" in str(outcome[0])


def test_an_exchange_that_failed_to_join_may_be_entered_again() -> None:
    box = from_url("memory://exchange-join-failed")
    with Exchange(integer_model(), mailbox=box, learner_id="a"):
        pass
    exchange = Exchange(torch.nn.Linear(4, 4), mailbox=box, learner_id="b")
    for _ in range(2):
        with pytest.raises(ConfigurationError, match="does not match"):
            exchange.__enter__()
