"""Damaged or foreign records under a shared model: refused in bounded time, by name.

A lifecycle rule, a cleanup script, a partial restore or another program can delete or
change what an Exchange wrote. Readers then raise ``InvalidDataError`` naming the key and
what was found, instead of spinning, shifting values or starting the model over.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from gradientmail import (  # noqa: E402 - after the importorskip
    InvalidDataError,
    KeyNotFoundError,
    Mailbox,
    from_url,
)
from gradientmail._exchange import reader  # noqa: E402
from gradientmail.torch import Exchange, load_shared  # noqa: E402
from tests.support.delegating import Delegating  # noqa: E402
from tests.support.exchange_workers import (  # noqa: E402
    exact_exchange,
    initial,
    integer_model,
    shared_now,
)
from tests.support.polling import returns_within, wait_until  # noqa: E402

HEAD = "exchange/model/head"


def more_than(exchange: Exchange, done: int) -> bool:
    """More than ``done`` exchanges, or a failed thread (whose error the next step raises)."""
    return exchange.stats.exchanges > done or exchange._handoff.error is not None


@pytest.fixture(autouse=True)
def _quick_give_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """Readers give up on an unreadable version after half a second here (10 s by default,
    checked on a fake clock in ``test_exchange_reader``)."""
    monkeypatch.setattr(reader, "UNREADABLE_AFTER_S", 0.5)


def trained(box: Mailbox, versions: int = 3) -> None:
    """A learner that made ``versions`` versions, one step of 1 each, and left."""
    model = integer_model()
    with exact_exchange(model, box, "trainer", every=1) as exchange:
        for n in range(versions):
            with torch.no_grad():
                for p in model.parameters():
                    p -= 1
            exchange.step()
            wait_until(partial(more_than, exchange, n), 30, "the exchange")


def head_record(box: Mailbox) -> dict[str, Any]:
    return dict(json.loads(box.get(HEAD)))


def rewrite_head(box: Mailbox, change: Callable[[dict[str, Any]], object]) -> dict[str, Any]:
    record = head_record(box)
    change(record)
    box.put(HEAD, json.dumps(record).encode())
    return record


def fragment(record: dict[str, Any], index: int) -> str:
    return f"exchange/model/data/{record['token']}/{index:05d}"


class CountsSwaps(Delegating):
    def __init__(self, inner: Mailbox) -> None:
        super().__init__(inner)
        self.swaps = 0

    def put_if_match(self, key: str, data: Any, version: Any) -> Any:
        self.swaps += 1
        return self.inner.put_if_match(key, data, version)


def refused(call: Callable[[], object], *patterns: str) -> str:
    """``call()`` raises InvalidDataError within a minute, its message matching each of
    ``patterns``; the message."""
    with pytest.raises(InvalidDataError) as raised:
        returns_within(call, 60, "the reader")
    message = str(raised.value)
    for pattern in patterns:
        assert pattern in message, message
    return message


def join(box: Mailbox, model: Any = None) -> None:
    with exact_exchange(model or integer_model(), box, "joiner", every=1):
        pass


# -- an unreadable version: bounded, by name ----------------------------------------------------


def test_a_missing_fragment_is_named_by_every_reader_and_a_joiner_never_swaps_over_it() -> None:
    box = from_url("memory://exchange-missing-fragment")
    trained(box)
    record = head_record(box)
    box.delete(fragment(record, 1))
    refused(lambda: load_shared(integer_model(), box), fragment(record, 1))
    counting = CountsSwaps(box)
    refused(lambda: join(counting), fragment(record, 1))  # type: ignore[arg-type]
    assert counting.swaps == 0, "the joiner swapped the head over a version it could not read"
    assert head_record(box) == record


def test_a_head_naming_an_absent_token_is_named() -> None:
    box = from_url("memory://exchange-absent-token")
    trained(box)
    record = rewrite_head(box, lambda r: r.update(token=r["token"][:13] + "0" * 16))
    refused(lambda: load_shared(integer_model(), box), fragment(record, 0))


def test_a_running_learner_meeting_an_unreadable_version_raises_at_a_step() -> None:
    box = from_url("memory://exchange-running-unreadable")
    model = integer_model()

    def run() -> None:
        with exact_exchange(model, box, "runner", every=1) as exchange:
            trained(box, versions=1)  # a version the runner has not read
            box.delete(fragment(head_record(box), 0))
            with torch.no_grad():
                for p in model.parameters():
                    p -= 1
            exchange.step()
            wait_until(lambda: exchange._handoff.error is not None, 30, "the thread giving up")
            exchange.step()

    with pytest.raises(InvalidDataError, match="missing"):
        run()


def test_a_head_naming_more_fragments_than_the_layout_makes_is_refused_at_once() -> None:
    box = from_url("memory://exchange-too-many-fragments")
    trained(box)
    rewrite_head(box, lambda r: r.update(fragments=r["fragments"] + 1))
    refused(lambda: load_shared(integer_model(), box), HEAD, "fragments")


# -- fragment lengths ------------------------------------------------------------------------


@pytest.mark.parametrize("change", [b"\x00\x00\x80\x3f", b""], ids=["longer", "shorter"])
def test_a_fragment_of_the_wrong_length_is_refused_naming_it_and_both_lengths(
    change: bytes,
) -> None:
    box = from_url(f"memory://exchange-fragment-length-{len(change)}")
    trained(box)
    key = fragment(head_record(box), 1)
    data = box.get(key)
    damaged = data + change if change else data[:-4]
    box.put(key, damaged)
    refused(lambda: load_shared(integer_model(), box), key, str(len(damaged)), str(len(data)))


# -- deleted or rewound records ----------------------------------------------------------------


def test_a_deleted_head_with_versions_still_stored_is_refused_not_started_over() -> None:
    box = from_url("memory://exchange-deleted-head")
    trained(box)
    box.delete(HEAD)
    refused(lambda: join(box), HEAD, "deleted", "name=")
    with pytest.raises(Exception, match="not found"):
        box.get(HEAD)  # no new model was started


def test_a_deleted_layout_is_refused_and_never_rewritten_by_another_shape() -> None:
    box = from_url("memory://exchange-deleted-layout")
    trained(box)
    box.delete("exchange/model/layout")
    with pytest.raises(InvalidDataError, match="layout"):
        Exchange(torch.nn.Linear(4, 4), mailbox=box, learner_id="other").__enter__()
    with pytest.raises(Exception, match="not found"):
        box.get("exchange/model/layout")


def test_a_head_whose_version_was_set_back_is_refused() -> None:
    box = from_url("memory://exchange-version-set-back")
    trained(box)
    rewrite_head(box, lambda r: r.update(version=1))
    refused(lambda: load_shared(integer_model(), box), HEAD, "set back")


def test_a_head_restored_from_an_older_copy_is_refused_by_a_learner_that_saw_newer() -> None:
    box = from_url("memory://exchange-restored-head")
    model = integer_model()

    def run() -> None:
        with exact_exchange(model, box, "runner", every=1, keep=10) as exchange:
            old = box.get(HEAD)
            trained(box, versions=2)
            exchange.step()  # reads the newer head
            wait_until(lambda: exchange.stats.exchanges == 1, 30, "the exchange")
            box.put(HEAD, old)
            with torch.no_grad():
                for p in model.parameters():
                    p -= 1
            exchange.step()
            wait_until(lambda: exchange._handoff.error is not None, 30, "the thread refusing")
            exchange.step()

    with pytest.raises(InvalidDataError, match="went back"):
        run()


def test_an_emptied_ledger_is_refused_as_damage_not_taken_for_a_newer_process() -> None:
    box = from_url("memory://exchange-emptied-ledger")
    model = integer_model()

    def run() -> None:
        with exact_exchange(model, box, "runner", every=1) as exchange:
            rewrite_head(box, lambda r: r.update(learners={}))
            exchange.step()
            wait_until(lambda: exchange._handoff.error is not None, 30, "the thread refusing")
            exchange.step()

    with pytest.raises(InvalidDataError, match="ledger"):
        run()


# -- clocks ----------------------------------------------------------------------------------


def test_a_writer_whose_clock_is_far_ahead_is_warned_about_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Active learners are counted by the writers' clocks: a learner 1.5 windows ahead
    makes the others look expired to it. Each learner warns once about the other's clock
    (more than a quarter of the 600 s window apart)."""
    caplog.set_level(logging.WARNING, logger="gradientmail.exchange")
    box = from_url("memory://exchange-skew")
    ahead = exact_exchange(integer_model(), box, "ahead", every=1)
    ahead._handoff.applier.store.clock = lambda: time.time() + 900
    with ahead, exact_exchange(integer_model(), box, "here", every=1) as here:
        for _ in range(3):
            for exchange in (ahead, here):
                done = exchange.stats.exchanges
                exchange.step()
                wait_until(partial(more_than, exchange, done), 30, "the exchange")
    said = [r.getMessage() for r in caplog.records if "clock" in r.getMessage()]
    by_here = [m for m in said if m.startswith("exchange learner 'here'")]
    assert len(by_here) == 1, said
    assert "'ahead'" in by_here[0], said
    assert "150 s" in by_here[0], said
    assert len([m for m in said if m.startswith("exchange learner 'ahead'")]) == 1, said


def test_learners_on_one_clock_are_not_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="gradientmail.exchange")
    box = from_url("memory://exchange-no-skew")
    model_a, model_b = integer_model(), integer_model()
    with (
        exact_exchange(model_a, box, "a", every=1) as a,
        exact_exchange(model_b, box, "b", every=1) as b,
    ):
        for _ in range(3):
            for exchange in (a, b):
                done = exchange.stats.exchanges
                exchange.step()
                wait_until(partial(more_than, exchange, done), 30, "the exchange")
    assert not [r for r in caplog.records if "clock" in r.getMessage()]
    assert torch.equal(shared_now(box), initial())


class MissesData(Delegating):
    """Sets :attr:`missed` once a read of a fragment found nothing."""

    def __init__(self, inner: Mailbox) -> None:
        super().__init__(inner)
        self.missed = threading.Event()

    def get(self, key: str) -> bytes:
        try:
            return self.inner.get(key)
        except KeyNotFoundError:
            if "/data/" in key:
                self.missed.set()
            raise


def test_leaving_through_an_exception_ends_the_wait_on_an_unreadable_version(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(reader, "UNREADABLE_AFTER_S", 600.0)
    box = from_url("memory://exchange-leave-unreadable")
    watched = MissesData(box)
    model = integer_model()

    def fail_while_it_waits() -> None:
        with exact_exchange(model, watched, "runner", every=1) as exchange:  # type: ignore[arg-type]
            trained(box, versions=1)
            box.delete(fragment(head_record(box), 0))
            with torch.no_grad():
                for p in model.parameters():
                    p -= 1
            exchange.step()
            assert watched.missed.wait(30), "the exchange met the missing fragment"
            raise RuntimeError("the loop failed")

    with pytest.raises(RuntimeError, match="the loop failed"):
        returns_within(fail_while_it_waits, 60, "leaving through an exception")
