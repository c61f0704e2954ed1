"""A learner that dies between the two writes of a completion (its claim swapped to
``done``, ``done/{id}`` not yet created) leaves a unit that is done but unrecorded. Built
on purpose on every backend with an interleaving hook, not left to where a SIGKILL lands:
whoever comes next, the learner restarted or another one, writes the missing record
(marked ``repaired``) and does not deliver the unit again, since its consumer took every
item. It ends as soon as that record is written, not a renewal period later.
"""

from __future__ import annotations

import time

import pytest

from gradientmail import Mailbox, WorkerError
from gradientmail._record_codec import decode_record
from gradientmail.patterns.shared_queue import shared_queue
from tests.support.interleave import Interleave

UNITS = {"u0": 0, "u1": 1}


class Killed(Exception):
    """Stands for the process dying at this point."""


def items_of(unit: int) -> list[int]:
    return [unit * 10 + i for i in range(3)]


def die() -> None:
    raise Killed("between the claim's swap to done and the done/ record")


@pytest.mark.parametrize("heir", ["a", "b"], ids=["restarted", "another-learner"])
def test_a_completion_cut_between_its_two_writes_is_repaired_not_redelivered(
    box: Mailbox, heir: str
) -> None:
    dying = Interleave(box, "put_if_match", lambda key: key.endswith("units/u0"), die)
    first: list[int] = []
    with (
        pytest.raises(WorkerError) as caught,
        shared_queue(
            UNITS, mailbox=dying, learner_id="a", load=items_of, order=["u0"], prefetch=1
        ) as q,  # type: ignore[arg-type]
    ):
        first.extend(q)
    assert isinstance(caught.value.__cause__, Killed), caught.value
    assert first[:3] == items_of(0)
    assert "done/u0" not in set(box.list("done/")), "the interleaving did not cut the completion"
    began = time.monotonic()
    with shared_queue(UNITS, mailbox=box, learner_id=heir, load=items_of) as q:
        got = list(q)
    # Not a renewal period (20 s at the default lease) waiting to confirm the end again.
    assert time.monotonic() - began < 10, "the heir waited long after repairing the unit"
    assert not set(got) & set(items_of(0)), "a unit whose items were all taken came again"
    assert set(items_of(1)) <= set(first) | set(got)
    record = decode_record(box.get("done/u0")) or {}
    assert record.get("repaired") is True
    assert {key.removeprefix("done/") for key in box.list("done/")} == set(UNITS)
