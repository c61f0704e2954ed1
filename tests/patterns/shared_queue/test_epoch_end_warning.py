"""A learner that ends its epoch while others hold units (``wait_for_others=False``, as the
DataLoader adapter runs) says so at WARNING, naming them: an exit 0 with units left in
progress is never silent."""

from __future__ import annotations

import logging

import pytest

from gradientmail import Mailbox
from gradientmail.patterns.shared_queue import shared_queue

UNITS = {f"u{i}": i for i in range(4)}


@pytest.fixture
def box(local_box: Mailbox) -> Mailbox:
    """``memory://`` and ``file://``: the mechanism is gradientmail's own, above the
    Mailbox interface (see ``tests.support.rigs.local_rig``)."""
    return local_box


def test_ending_beside_held_units_names_their_holder(
    box: Mailbox, caplog: pytest.LogCaptureFixture
) -> None:
    with shared_queue(UNITS, mailbox=box, learner_id="a", load=lambda u: [u], prefetch=1) as a:
        first = next(a)  # "a" holds at least the unit of this item, unfinished
        with (
            caplog.at_level(logging.WARNING, logger="gradientmail.patterns.shared_queue._waiting"),
            shared_queue(
                UNITS, mailbox=box, learner_id="b", load=lambda u: [u], wait_for_others=False
            ) as b,
        ):
            got_b = list(b)
        (line,) = [r.getMessage() for r in caplog.records if "ends epoch" in r.getMessage()]
        assert line.startswith("'b' ends epoch 0 with no unit free while other learners hold")
        assert "a (" in line
        rest = list(a)
    assert sorted([first, *got_b, *rest]) == sorted(UNITS.values())


def test_ending_when_every_unit_is_done_is_quiet(
    box: Mailbox, caplog: pytest.LogCaptureFixture
) -> None:
    with (
        caplog.at_level(logging.WARNING, logger="gradientmail.patterns.shared_queue._waiting"),
        shared_queue(
            UNITS, mailbox=box, learner_id="b", load=lambda u: [u], wait_for_others=False
        ) as b,
    ):
        assert sorted(b) == sorted(UNITS.values())
    assert not [r for r in caplog.records if "ends epoch" in r.getMessage()]
