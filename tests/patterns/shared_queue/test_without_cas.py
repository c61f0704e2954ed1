"""``shared_queue`` on a store with atomic create but no compare-and-swap.

What the queue promises there: every unit is still completed exactly once; claims are
permanent, so a learner that finds only others' claims ends instead of waiting for a
takeover that cannot happen, and ``gradientmail status`` says why; an early exit deletes
the learner's unfinished claims, so another learner takes those units. The fake below
refuses every compare-and-swap call (the base mailbox raises ``NotSupportedError``), so a
test also fails if the queue ever tries one.
"""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from typing import ClassVar

from gradientmail import Capability
from gradientmail.backends.memory import MemoryMailbox
from gradientmail.patterns._run_layout import RunLayout
from gradientmail.patterns.shared_queue import shared_queue
from gradientmail.patterns.shared_queue._unit_claims import UnitClaims
from gradientmail.status import format_status, read_status

JOIN = 60


class NoCompareAndSwap(MemoryMailbox):
    """``memory://`` that declares atomic create only."""

    capabilities: ClassVar[frozenset[Capability]] = frozenset({Capability.ATOMIC_CREATE})


def no_cas_box() -> NoCompareAndSwap:
    return NoCompareAndSwap(f"no-cas-{uuid.uuid4().hex[:8]}")


def items_of(unit: int) -> list[int]:
    return [unit * 10 + i for i in range(3)]


def test_three_learners_complete_every_unit_exactly_once() -> None:
    box = no_cas_box()
    units = {f"u{i:02d}": i for i in range(30)}
    got: Counter[int] = Counter()
    lock = threading.Lock()
    errors: list[BaseException] = []

    def learner(name: str) -> None:
        try:
            with shared_queue(units, mailbox=box, learner_id=name, load=items_of) as q:
                for item in q:
                    with lock:
                        got[item] += 1
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=learner, args=(n,)) for n in ("a", "b", "c")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(JOIN)
    assert not errors, errors
    assert got == Counter(item for unit in units.values() for item in items_of(unit))
    assert {key.removeprefix("done/") for key in box.list("done/")} == set(units)


def test_a_learner_that_finds_only_others_claims_ends_and_status_says_why() -> None:
    box = no_cas_box()
    units = {"u0": 0, "u1": 1}
    started, finish = threading.Event(), threading.Event()

    def slow(unit: int) -> list[int]:
        started.set()
        assert finish.wait(JOIN), "the test never let the holder finish"
        return items_of(unit)

    holder_got: list[int] = []

    def holder() -> None:
        with shared_queue(units, mailbox=box, learner_id="holder", load=slow, order=["u0"]) as q:
            holder_got.extend(q)

    thread = threading.Thread(target=holder)
    thread.start()
    try:
        assert started.wait(JOIN), "the holder never claimed u0"
        # The holder is inside load(u0): it holds u0 and has not claimed u1.
        other_got: list[int] = []
        complete: list[bool] = []

        def other() -> None:
            with shared_queue(units, mailbox=box, learner_id="other", load=items_of) as q:
                other_got.extend(q)  # ends although u0 is unfinished: no takeover can happen
            complete.append(q.stats.run_complete)

        runner = threading.Thread(target=other)
        runner.start()
        runner.join(15)  # it ends at once; a learner waiting for u0 would wait for the test
        assert not runner.is_alive(), "a learner waited for a claim that is permanent here"
        assert other_got == items_of(1)
        assert complete == [False]
        status = read_status(box)
        assert (status.done, status.in_progress) == (1, 1)
        assert "claims are permanent" in format_status(status)
    finally:
        finish.set()
        thread.join(JOIN)
    assert holder_got == items_of(0)
    assert read_status(box).done == 2


def test_an_early_exit_deletes_the_learners_unfinished_claims() -> None:
    box = no_cas_box()
    units = {f"u{i}": i for i in range(6)}
    with shared_queue(units, mailbox=box, learner_id="leaver", load=items_of, prefetch=4) as q:
        next(iter(q))  # one item, then leave: the loader holds up to 4 more units' items
    assert not list(box.list("done/")), "the leaver finished no unit"
    assert not list(box.list("units/")), "an unfinished claim outlived the early exit"
    with shared_queue(units, mailbox=box, learner_id="stayer", load=items_of) as q:
        got = list(q)
    assert sorted(got) == sorted(item for unit in units.values() for item in items_of(unit))
    assert len(list(box.list("done/"))) == len(units)


def test_a_released_claim_is_gone_so_the_next_learner_claims_the_unit_with_a_create() -> None:
    """Without compare-and-swap nothing takes a claim over: a release must delete it, or
    the unit stays claimed forever by a learner that left, and status counts it in
    progress."""
    box = no_cas_box()
    layout = RunLayout(0)
    leaver, other = (UnitClaims(box, layout, name, incarnation=1) for name in ("leaver", "o"))
    held = leaver.claim("u0")
    assert held is not None
    assert other.claim("u0") is None, "a claim is exclusive while it stands"
    assert leaver.release(held)
    assert list(box.list(layout.units)) == [], "the released claim outlived the release"
    assert read_status(box).in_progress == 0
    assert other.claim("u0") is not None
