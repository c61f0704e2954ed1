"""The store failing under an Exchange: outages are ridden out with the queue's patience,
and ambiguous outcomes are settled, never fatal when they can be settled.

The exact integer model again (``outer_lr=1, staleness=None``): after any outage, lost
response or failed delete, the shared model must be the initial one plus every step of
every learner, each applied once.
"""

from __future__ import annotations

import logging
import random
import threading
from functools import partial
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from gradientmail import (  # noqa: E402 - after the importorskip
    AccessDeniedError,
    KeyNotFoundError,
    Mailbox,
    TransientBackendError,
    WorkerError,
    from_url,
)
from gradientmail.patterns._patience import DEFAULT_PATIENCE_S  # noqa: E402
from tests.support.ambiguous import Ambiguous  # noqa: E402
from tests.support.delegating import Delegating  # noqa: E402
from tests.support.exchange_workers import (  # noqa: E402
    exact_exchange,
    initial,
    integer_model,
    shared_now,
    subtract,
    totals_of_threads,
)
from tests.support.outage import Outage  # noqa: E402
from tests.support.polling import returns_within, wait_until  # noqa: E402
from tests.support.rigs import Rig  # noqa: E402

PATIENCE_LOG = "gradientmail.patterns._patience"


def test_the_default_patience_is_the_shared_queues_default_lease() -> None:
    from gradientmail.patterns.shared_queue import DEFAULT_LEASE

    assert DEFAULT_PATIENCE_S == DEFAULT_LEASE


def test_an_outage_is_ridden_out_steps_never_wait_and_the_progress_lands_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=PATIENCE_LOG)
    box = from_url("memory://exchange-outage")
    outage = Outage(box)
    model = integer_model()
    with exact_exchange(model, outage, "rider", every=1) as exchange:  # type: ignore[arg-type]
        subtract(model, 1)
        exchange.step()
        wait_until(lambda: exchange.stats.exchanges == 1, 30, "the first exchange")
        outage.down.set()
        subtract(model, 1)
        exchange.step()  # starts an exchange into the outage
        assert outage.failed.wait(30), "the exchange thread met the outage"

        def steps_meanwhile() -> None:
            for _ in range(10):
                subtract(model, 1)
                exchange.step()  # adopts nothing, starts nothing: one is in flight

        returns_within(steps_meanwhile, 60, "step() during the outage")
        outage.down.clear()
        wait_until(lambda: exchange.stats.exchanges == 2, 30, "the exchange after the outage")
    assert exchange.stats.exchanges >= 3, "leaving exchanged the steps made meanwhile"
    assert torch.equal(shared_now(box), initial() - 12)
    messages = [r.getMessage() for r in caplog.records]
    assert any("exchange learner 'rider'" in m and "retrying for up to 60 s" in m for m in messages)
    assert any("answered" in m and "again" in m for m in messages)
    assert not any("giving up" in m for m in messages)


def test_an_outage_longer_than_the_patience_reaches_the_loop_at_a_step() -> None:
    box = from_url("memory://exchange-long-outage")
    outage = Outage(box)
    model = integer_model()
    exchange = exact_exchange(model, outage, "gives-up", every=1, patience=0.5)
    with pytest.raises(WorkerError, match="injected outage") as raised, exchange:  # noqa: PT012
        outage.down.set()
        subtract(model, 1)
        exchange.step()
        wait_until(lambda: exchange._handoff.error is not None, 30, "the thread giving up")
        exchange.step()
    assert isinstance(raised.value.__cause__, TransientBackendError)


def test_a_join_during_an_outage_waits_for_the_store() -> None:
    box = from_url("memory://exchange-join-outage")
    outage = Outage(box)
    ender = outage.down_until_failed()
    model = integer_model()
    with exact_exchange(model, outage, "late", every=1):  # type: ignore[arg-type]
        subtract(model, 2)
    ender.join()
    assert torch.equal(shared_now(box), initial() - 2)


class Flaky(Delegating):
    """Fails one call in ``1 / rate`` as transient, at random, and loses the response to one
    head swap in four after it landed."""

    def __init__(self, inner: Mailbox, seed: int, rate: float = 0.15) -> None:
        super().__init__(inner)
        self.random = random.Random(seed)
        self.rate = rate
        self.lock = threading.Lock()
        self.failed = 0

    def _maybe_fail(self, key: str) -> None:
        with self.lock:
            fail = self.random.random() < self.rate
            self.failed += fail
        if fail:
            raise TransientBackendError("injected fault", key=key)

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self.inner, name)
        if name not in {"get", "get_versioned", "put_if_absent", "put", "delete"}:
            return attribute

        def call(key: str, *args: Any) -> Any:
            self._maybe_fail(key)
            return attribute(key, *args)

        return call

    def put_if_match(self, key: str, data: Any, version: Any) -> Any:
        self._maybe_fail(key)
        result = self.inner.put_if_match(key, data, version)
        with self.lock:
            lost = self.random.random() < 0.25
        if lost:
            from gradientmail import OutcomeUnknownError

            raise OutcomeUnknownError("response lost (test)", key=key)
        return result


@pytest.mark.parametrize("rig_name", ["rig_memory", "rig_file"])
def test_eight_threads_under_random_faults_apply_every_delta_exactly_once(
    request: pytest.FixtureRequest, rig_name: str
) -> None:
    rig: Rig = request.getfixturevalue(rig_name)
    box = rig.fresh()
    flaky = [Flaky(rig.open(box.url), seed=i) for i in range(8)]

    def learner(i: int) -> int:
        model = integer_model()
        with exact_exchange(model, flaky[i], f"t{i}", every=2) as exchange:  # type: ignore[arg-type]
            for _ in range(10):
                subtract(model, i + 1)
                exchange.step()
        return -(i + 1) * 10

    totals = totals_of_threads(learner, 8)
    assert sum(f.failed for f in flaky) > 20, "the faults happened"
    assert torch.equal(shared_now(box), initial() + sum(totals.values()))


# -- ambiguous outcomes ------------------------------------------------------------------------


class ReadTooEarly(Delegating):
    """The first read of the layout and of the head find nothing: they happened just before
    another learner created them."""

    def __init__(self, inner: Mailbox) -> None:
        super().__init__(inner)
        self.early = {"exchange/model/layout", "exchange/model/head"}

    def get(self, key: str) -> bytes:
        if key in self.early:
            self.early.discard(key)
            raise KeyNotFoundError(key)
        return self.inner.get(key)

    def get_versioned(self, key: str) -> Any:
        if key in self.early:
            self.early.discard(key)
            raise KeyNotFoundError(key)
        return self.inner.get_versioned(key)


@pytest.mark.parametrize("joining", [True, False], ids=["joiner", "first"])
@pytest.mark.parametrize("stored", [True, False], ids=["landed", "lost"])
def test_a_layout_create_whose_outcome_is_unknown_is_settled_by_reading_it_back(
    stored: bool, joining: bool
) -> None:
    """The first learner's create landed or not: the layout read back says which. A joiner
    that raced the first learner (it read no layout and no head, then the first learner
    wrote both) fails its create in any case: the layout read back is there."""
    box = from_url(f"memory://exchange-ambiguous-layout-{stored}-{joining}")
    inner: Mailbox = box
    if joining:
        with exact_exchange(integer_model(), box, "first", every=1):
            pass
        inner = ReadTooEarly(box)  # type: ignore[assignment]
    ambiguous = Ambiguous(inner, ("exchange/model/layout",), stored=stored)
    model = integer_model()
    with exact_exchange(model, ambiguous, "learner", every=1):  # type: ignore[arg-type]
        subtract(model, 3)
    assert ambiguous.hit == ["exchange/model/layout"]
    assert torch.equal(shared_now(box), initial() - 3)


@pytest.mark.parametrize("stored", [True, False], ids=["landed", "lost"])
def test_fragment_creates_whose_outcome_is_unknown_are_settled_and_applied_once(
    stored: bool,
) -> None:
    box = from_url(f"memory://exchange-ambiguous-fragments-{stored}")
    ambiguous = Ambiguous(box, ("exchange/model/data/",), stored=stored)
    model = integer_model()
    with exact_exchange(model, ambiguous, "a", every=1) as exchange:  # type: ignore[arg-type]
        for _ in range(3):
            subtract(model, 1)
            exchange.step()
    assert len(ambiguous.hit) > 3, "every fragment's first create was ambiguous"
    assert exchange.stats.unknown_outcomes >= len(ambiguous.hit)
    assert torch.equal(shared_now(box), initial() - 3)


class DeletesRefused(Delegating):
    """Every delete is refused: the store (or its credentials) allows no deletion."""

    def __init__(self, inner: Mailbox) -> None:
        super().__init__(inner)
        self.refused = 0

    def delete(self, key: str) -> None:
        self.refused += 1
        raise AccessDeniedError("delete refused (test)", key=key)


def test_a_failed_delete_after_a_landed_swap_is_logged_and_never_fatal(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="gradientmail.exchange")
    box = from_url("memory://exchange-deletes-refused")
    refusing = DeletesRefused(box)
    model = integer_model()
    with exact_exchange(model, refusing, "a", every=1, keep=1) as exchange:  # type: ignore[arg-type]
        for _ in range(4):
            subtract(model, 1)
            done = exchange.stats.exchanges
            exchange.step()
            wait_until(partial(lambda e, d: e.stats.exchanges > d, exchange, done), 30, "it")
    assert refusing.refused > 0, "the exchanges deleted versions that left the history"
    assert torch.equal(shared_now(box), initial() - 4)
    assert any("left for the sweep" in r.getMessage() for r in caplog.records)


def test_leaving_through_an_exception_during_an_outage_does_not_wait_it_out() -> None:
    box = from_url("memory://exchange-exit-in-outage")
    outage = Outage(box)
    model = integer_model()
    exchange = exact_exchange(model, outage, "a", every=1, patience=300)

    def fail_during_the_outage() -> None:
        with pytest.raises(RuntimeError, match="the loop failed"), exchange:  # noqa: PT012
            outage.down.set()
            subtract(model, 1)
            exchange.step()
            assert outage.failed.wait(30), "the exchange thread met the outage"
            raise RuntimeError("the loop failed")

    returns_within(fail_during_the_outage, 60, "leaving through an exception")
