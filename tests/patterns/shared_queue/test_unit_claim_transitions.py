"""A unit's claim changes hands only by compare-and-swap: one taker, never a done unit back.

``shared_queue`` learners take over a released unit, or a dead learner's, by swapping its
claim against the version they read. Two learners that read the same claim must not both
win, and a learner whose read is stale (the owner completed the unit since) must lose, or
the unit would be trained twice or completed twice. The interleavings are written out
step by step with two or three :class:`UnitClaims` on one mailbox, so they happen every
time. Each test runs on every backend.
"""

from __future__ import annotations

import pytest

from gradientmail import Capability, Mailbox
from gradientmail.patterns._claims import read_claim
from gradientmail.patterns._run_layout import RunLayout
from gradientmail.patterns.shared_queue._unit_claims import DONE, RELEASED, UnitClaims

LAYOUT = RunLayout(0)


@pytest.fixture
def cas_box(box: Mailbox) -> Mailbox:
    if not box.supports(Capability.COMPARE_AND_SWAP):
        pytest.skip("takeovers need compare-and-swap")
    return box


def _learner(box: Mailbox, name: str) -> UnitClaims:
    return UnitClaims(box, LAYOUT, name, incarnation=1)


def test_two_learners_taking_over_one_released_unit_from_one_read_one_wins(
    cas_box: Mailbox,
) -> None:
    owner, first, second = (_learner(cas_box, n) for n in ("owner", "first", "second"))
    held = owner.claim("u")
    assert held is not None
    assert owner.release(held)
    read = first.read("u")
    assert read is not None
    record, version = read
    assert UnitClaims.state(record) == RELEASED
    # Both read the released claim at the same version; both try to take it.
    won = first.take_over("u", record, version)
    lost = second.take_over("u", record, version)
    assert won is not None
    assert lost is None, "a second learner took over the same unit: it would load it twice"
    stored = read_claim(cas_box, LAYOUT.units + "u")
    assert stored is not None
    assert stored.owner == "first"
    assert stored.extra["previous"] == ["owner"]


def test_a_takeover_from_a_stale_read_loses_to_the_owners_completion(cas_box: Mailbox) -> None:
    owner, taker = _learner(cas_box, "owner"), _learner(cas_box, "taker")
    held = owner.claim("u")
    assert held is not None
    read = taker.read("u")  # the taker believes the owner dead, and reads its claim
    assert read is not None
    assert owner.complete(held), "the owner was alive after all, and completed the unit"
    assert taker.take_over("u", *read) is None, "a completed unit was taken over"
    stored = read_claim(cas_box, LAYOUT.units + "u")
    assert stored is not None
    assert (stored.owner, UnitClaims.state(stored)) == ("owner", DONE)


def test_an_owner_taken_over_cannot_complete_or_release_its_unit(cas_box: Mailbox) -> None:
    owner, taker = _learner(cas_box, "owner"), _learner(cas_box, "taker")
    held = owner.claim("u")
    assert held is not None
    read = taker.read("u")
    assert read is not None
    assert taker.take_over("u", *read) is not None
    assert not owner.complete(held), "a fenced owner recorded a completion"
    assert not owner.release(held)
    assert list(cas_box.list(LAYOUT.done)) == []
    stored = read_claim(cas_box, LAYOUT.units + "u")
    assert stored is not None
    assert stored.owner == "taker"
