"""A learner's unit rows: one codec, and records written by older versions still read.

A progress record lists its units as ``[identifier, claimed, started, finished, reclaimed,
epoch]``; records written before takeovers were recorded lack ``reclaimed``, and those
written before epochs lack ``epoch``. ``gradientmail status`` and a resuming
:class:`~gradientmail.session.Session` read all three the same way.
"""

from __future__ import annotations

import json
import time

import pytest

from gradientmail import Mailbox
from gradientmail._unit_rows import UnitRow, decode_rows
from gradientmail.session import Session
from gradientmail.status import read_status


@pytest.fixture
def box(local_box: Mailbox) -> Mailbox:
    return local_box


def test_a_row_round_trips_and_each_older_shape_decodes_with_defaults() -> None:
    row = UnitRow("u1", 1.0, 2.0, 3.0, True, 4)
    assert json.loads(json.dumps(row.encode())) == ["u1", 1.0, 2.0, 3.0, True, 4]
    assert UnitRow.decode(json.loads(json.dumps(row.encode()))) == row
    assert UnitRow.decode(["u1", 1, 2, 3, True]) == UnitRow("u1", 1.0, 2.0, 3.0, True, 0)
    assert UnitRow.decode(["u1", 1, None, None]) == UnitRow("u1", 1.0, None, None, False, 0)
    # Not a row at all, or not enough of one: skipped, never fatal.
    assert decode_rows([["u1", 1, 2, 3], "junk", ["short", 1], None, 7]) == [
        UnitRow("u1", 1.0, 2.0, 3.0)
    ]
    assert decode_rows("not a list") == []
    # A time that is not a number reads as not yet; an epoch that is not one as 0.
    assert UnitRow.decode(["u1", "x", True, 3, 1, "e"]) == UnitRow("u1", None, None, 3.0, True, 0)


def _older_record(now: float) -> dict[str, object]:
    """A finished learner's record whose rows have the shapes of three versions."""
    return {
        "learner": "old",
        "state": "finished",
        "started_at": now - 60,
        "updated_at": now - 1,
        "finished_at": now - 1,
        "units_claimed": 4,
        "units_finished": 3,
        "units": [
            ["u0", now - 50, now - 49, now - 40],  # before takeovers and epochs
            ["u1", now - 40, now - 39, now - 30, True],  # before epochs
            ["u2", now - 30, now - 29, now - 20, False, 1],
            ["u3", now - 20, None, None, False, 1],
        ],
    }


def test_status_reads_the_rows_of_every_version_by_epoch(box: Mailbox) -> None:
    box.put("learners/old", json.dumps(_older_record(time.time())).encode())
    (whole,) = read_status(box).learners
    assert [unit.identifier for unit in whole["units"]] == ["u0", "u1", "u2", "u3"]
    assert [unit.reclaimed for unit in whole["units"]] == [False, True, False, False]
    (first,) = read_status(box, epoch=0).learners
    assert (first["units_claimed"], first["units_finished"]) == (2, 2)
    (second,) = read_status(box, epoch=1).learners
    assert (second["units_claimed"], second["units_finished"]) == (2, 1)


def test_a_session_resuming_an_older_record_keeps_its_finished_units(box: Mailbox) -> None:
    box.put("learners/old", json.dumps(_older_record(time.time())).encode())
    with Session(box, "old", publish_every=60) as session:
        assert session.units_finished == 3
    rows = decode_rows(json.loads(box.get("learners/old"))["units"])
    assert [(row.identifier, row.epoch, row.reclaimed) for row in rows] == [
        ("u0", 0, False),
        ("u1", 0, True),
        ("u2", 1, False),
    ], "the unfinished unit is dropped, the rest kept with their fields"
