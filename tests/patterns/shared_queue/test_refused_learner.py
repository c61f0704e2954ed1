"""A learner the run refuses leaves the run as it was: its status, and its learner record.

The README's shared-queue block, run to completion, then run again with ``range(101)``: the
second is refused with ``RunMismatchError`` (a ``ConfigurationError``), and ``gradientmail
status`` of the finished run still says the learner finished and exits 0.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import gradientmail
from gradientmail import ConfigurationError, Mailbox
from gradientmail._cli import main
from gradientmail._errors import RunMismatchError
from gradientmail.patterns.shared_queue import shared_queue
from gradientmail.status import read_status


def load_unit(path: str) -> Iterator[tuple[str, int]]:
    for step in range(4):
        yield (path, step)


def readme_block(box: Mailbox, shards: int) -> int:
    units = {f"shard-{i:03d}": f"data/shard-{i:03d}.bin" for i in range(shards)}
    seen = 0
    with (
        gradientmail.Session(box, "node-0") as session,
        shared_queue(
            units, mailbox=box, learner_id="node-0", load=load_unit, prefetch=8
        ) as batches,
    ):
        for _path, _step in batches:
            session.step(samples=32)
            seen += 1
    return seen


def test_a_refused_rerun_leaves_the_finished_learner_finished(
    local_rig: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    box = local_rig.fresh()
    assert readme_block(box, 100) == 400
    before = box.get("learners/node-0")
    with pytest.raises(RunMismatchError) as refused:
        readme_block(box, 101)
    assert isinstance(refused.value, ConfigurationError)
    assert "first difference" in str(refused.value)
    assert box.get("learners/node-0") == before
    status = read_status(box)
    assert status.left == 0
    assert [r["state"] for r in status.learners] == ["finished"]
    assert main(["status", box.url]) == 0, capsys.readouterr()


def test_a_refused_learner_of_a_new_id_leaves_no_record(local_rig: Any) -> None:
    box = local_rig.fresh()
    units = {f"u{i}": i for i in range(3)}
    with shared_queue(units, mailbox=box, learner_id="a", load=lambda u: [u]) as queue:
        assert sorted(queue) == [0, 1, 2]
    with (
        pytest.raises(RunMismatchError),
        gradientmail.Session(box, "b"),
        shared_queue({"other": 1}, mailbox=box, learner_id="b", load=lambda u: [u]),
    ):
        pass
    assert "learners/b" not in list(box.list("learners/"))


def test_a_learner_that_failed_after_it_counted_is_still_failed(local_rig: Any) -> None:
    """The record is put back only for a refusal before anything was counted."""
    box = local_rig.fresh()

    def counted_then_refused() -> None:
        with gradientmail.Session(box, "c") as session:
            session.step(samples=1)
            raise RunMismatchError("raised after a step")

    with pytest.raises(RunMismatchError):
        counted_then_refused()
    record = read_status(box).learners
    assert [(r["learner"], r["state"]) for r in record] == [("c", "failed")]


def test_resuming_with_the_same_ids_but_other_values_is_refused(local_rig: Any) -> None:
    box = local_rig.fresh()
    old = {f"shard-{i}": f"v1/shard-{i}.bin" for i in range(3)}
    new = {f"shard-{i}": f"v2/shard-{i}.bin" for i in range(3)}
    with shared_queue(old, mailbox=box, learner_id="a", load=lambda u: [u]) as q:
        first = next(q)  # the run is under way, with old data

    def run(units: dict[str, str]) -> list[str]:
        with shared_queue(units, mailbox=box, learner_id="a", load=lambda u: [u]) as queue:
            return list(queue)

    with pytest.raises(RunMismatchError, match="same 3 unit identifiers but other unit values"):
        run(new)
    with shared_queue(old, mailbox=box, learner_id="a", load=lambda u: [u]) as q:
        rest = list(q)  # the same values resume
    assert first.startswith("v1/")
    assert all(item.startswith("v1/") for item in rest)


def test_values_that_are_not_json_are_not_fingerprinted(local_rig: Any) -> None:
    box = local_rig.fresh()

    class Shard:
        def __init__(self, n: int) -> None:
            self.n = n

    units = {f"s{i}": Shard(i) for i in range(2)}
    with shared_queue(units, mailbox=box, learner_id="a", load=lambda u: [u.n]) as q:
        assert sorted(q) == [0, 1]
    import json

    assert "values" not in json.loads(box.get("manifest"))
    again = {f"s{i}": Shard(i + 10) for i in range(2)}  # cannot be told apart: accepted
    with shared_queue(again, mailbox=box, learner_id="a", load=lambda u: [u.n]) as q:
        assert list(q) == []
