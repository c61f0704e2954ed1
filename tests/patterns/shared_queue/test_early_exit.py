"""Leaving early releases the learner's unfinished claims, at once and visibly.

A learner that leaves the ``with`` block before the end (``break``, an exception) moves
each claim it still holds, prefetched ones included, to ``released``. The others then take
those units as released units, at their next look. Without the release they would still
finish them, only later and as a dead learner's (its lease says it left): so these tests
read the claims and what the next learner says, not only that every unit gets done.
"""

from __future__ import annotations

import logging

import pytest

from gradientmail import Mailbox
from gradientmail.patterns._claims import parse_claim
from gradientmail.patterns._run_layout import RunLayout
from gradientmail.patterns.shared_queue import shared_queue
from gradientmail.status import read_status
from tests.support.polling import wait_until
from tests.support.queue_claims import claims_of, two_items

UNITS = {f"u{i}": i for i in range(6)}
LAYOUT = RunLayout(0)


@pytest.fixture
def box(local_box: Mailbox) -> Mailbox:
    """``memory://`` and ``file://``: the release is gradientmail's own."""
    return local_box


def leave_after_one_item(box: Mailbox) -> int:
    """``leaver`` takes one item and breaks out once its loader holds two more units
    (prefetched); how many units it released."""
    with shared_queue(UNITS, mailbox=box, learner_id="leaver", load=two_items, prefetch=4) as q:
        for _ in q:
            # the loader runs ahead
            wait_until(lambda: q.stats.units_claimed >= 3, 60, "the loader to prefetch", 0.01)
            break
    return q.stats.units_released


def test_an_early_exit_leaves_each_claim_it_held_released_and_counts_them(box: Mailbox) -> None:
    released = leave_after_one_item(box)
    claims = [parse_claim(box.get(key)) for key in box.list(LAYOUT.units)]
    states = set(claims_of(box, "leaver").values())
    assert len(claims) >= 3, "the loader held prefetched units beside the one begun"
    assert states == {"released"}, states
    assert released == len(claims)
    assert list(box.list(LAYOUT.done)) == []
    assert read_status(box).in_progress == 0, "status counts a released unit in progress"


def test_the_next_learner_takes_the_released_units_as_released_not_as_a_dead_learners(
    box: Mailbox, caplog: pytest.LogCaptureFixture
) -> None:
    released = leave_after_one_item(box)
    with (
        caplog.at_level(logging.INFO, logger="gradientmail.patterns.shared_queue._takeover"),
        shared_queue(UNITS, mailbox=box, learner_id="next", load=two_items) as q,
    ):
        got = list(q)
    assert sorted(got) == sorted(item for unit in UNITS.values() for item in two_items(unit))
    took = [r for r in caplog.records if r.name.endswith("_takeover")]
    assert [r.levelno for r in took] == [logging.INFO] * released, [r.message for r in took]
    assert all("released by 'leaver'" in r.getMessage() for r in took)
    assert read_status(box).complete


def test_a_unit_taken_over_while_waiting_is_released_on_an_early_exit_like_a_claimed_one(
    box: Mailbox,
) -> None:
    """The next learner claims the free units, then, with nothing free, takes the released
    ones over; it leaves at the first item of one. That unit, and every other it took over
    and did not finish, goes back released: a unit taken over is held like one claimed."""
    leave_after_one_item(box)
    released = set(claims_of(box, "leaver"))
    by_value = {value: ident for ident, value in UNITS.items()}
    left_at = None
    with shared_queue(UNITS, mailbox=box, learner_id="next", load=two_items, prefetch=1) as q:
        for unit, _ in q:
            if by_value[unit] in released:
                left_at = by_value[unit]
                break
    assert left_at is not None, "it never took a released unit over"
    assert q.stats.units_reclaimed >= 1
    states = claims_of(box, "next")
    assert states[left_at] == "released", states
    assert set(states.values()) <= {"done", "released"}, f"a unit it took stays held: {states}"
