"""Pipeline over a mailbox: what each key holds, and what a malformed record does.

The records are an internal layout, but two things about them are for users: an operator
can read who took an item or why a producer ended, and a namespace holding something else
stops the pipeline with an error naming the key instead of a hang or a ``KeyError``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from gradientmail import ConfigurationError
from gradientmail.backends.memory import MemoryMailbox
from gradientmail.patterns._workers import CarriedError
from gradientmail.patterns.pipeline import Pipeline, PipelineError, ProducerFailedError
from gradientmail.patterns.pipeline._records import (
    Aborted,
    End,
    ItemClaim,
    Manifest,
    Record,
    Registration,
    claim_key,
    end_key,
)
from tests.support.pipeline_workers import drain, open_pipe, payload
from tests.support.rigs import Rig

pytestmark = pytest.mark.timeout(120)

_counter = iter(range(10**9))


def fresh_box() -> MemoryMailbox:
    return MemoryMailbox(f"pipeline-records-{next(_counter)}")


RECORDS: list[Record] = [
    Manifest(("a", "nœud-1"), 8),
    Registration("host-1", 4242, "f" * 32),
    End("done", count=5, by="a", token="f" * 32),
    End("lost", count=2, by="trainer", token=None, silent_s=15.25),
    Aborted("stopped by the operator"),
    Aborted("producer 'a' ended failed", producer="a"),
    ItemClaim("trainer", "0" * 32, 1700000000.5, 1, n=4, delivered_before=2, state="claimed"),
    ItemClaim("t-2", "1" * 32, 1.0, 2, n=0, delivered_before=0, state="delivered", taken_from="t"),
]


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: type(r).__name__)
def test_each_record_survives_a_round_trip_as_a_json_object(record: Record) -> None:
    data = record.to_bytes()
    assert isinstance(json.loads(data), dict)
    assert type(record).from_bytes(data, "some/key") == record


def test_a_failed_end_carries_the_producers_error_as_text() -> None:
    try:
        raise ValueError("bad chunk")
    except ValueError as exc:
        carried = CarriedError.of(exc)
    end = End("failed", count=3, by="a", token="t", error=carried)
    read = End.from_bytes(end.to_bytes(), end_key("a"))
    assert read.error is not None
    assert (read.error.type_name, read.error.message) == ("ValueError", "bad chunk")
    assert "raise ValueError" in read.error.traceback_text


MALFORMED: list[tuple[type[Record], Any, str]] = [
    (End, b"not json", "not a JSON object"),
    (End, [1, 2], "not a JSON object"),
    (End, {"status": "done", "by": "a", "token": None}, "field 'count' is missing"),
    (End, {"status": "done", "count": "3", "by": "a", "token": None}, "'count' is not of type int"),
    (
        End,
        {"status": "done", "count": True, "by": "a", "token": None},
        "'count' is not of type int",
    ),
    (End, {"status": "paused", "count": 1, "by": "a", "token": None}, "status is 'paused'"),
    (Manifest, {"kind": "something else"}, "kind is 'something else'"),
    (Registration, {"host": "h", "pid": 1}, "field 'token' is missing"),
    (Aborted, {"why": "?"}, "field 'reason' is missing"),
    (ItemClaim, {"owner": 7, "token": "t", "claimed_at": 1.0}, "'owner' is not of type str"),
    (
        ItemClaim,
        {"owner": "c", "token": "t", "claimed_at": 1.0, "incarnation": 1, "n": 0}
        | {"delivered_before": 0, "state": "lost"},
        "state is 'lost'",
    ),
]


@pytest.mark.parametrize(("kind", "stored", "problem"), MALFORMED)
def test_a_malformed_record_is_a_pipeline_error_naming_the_key(
    kind: type[Record], stored: Any, problem: str
) -> None:
    data = stored if isinstance(stored, bytes) else json.dumps(stored).encode()
    with pytest.raises(PipelineError, match=problem) as caught:
        kind.from_bytes(data, "producers/a/end")
    assert "'producers/a/end'" in str(caught.value)
    assert "new, empty namespace" in str(caught.value)


def test_a_consumer_meeting_a_malformed_end_record_raises_naming_the_key() -> None:
    box = fresh_box()
    pipe = Pipeline.over_mailbox(box, ["a"], stall_timeout=30)
    box.put_if_absent(end_key("a"), b'{"status": "done"}')  # something else wrote here
    with pytest.raises(PipelineError, match=r"'producers/a/end'.*field 'count' is missing"):
        next(pipe.consumer("c"))


def test_a_foreign_manifest_is_refused_naming_the_key() -> None:
    box = fresh_box()
    box.put_if_absent("pipeline", b'{"kind": "a spreadsheet"}')
    with pytest.raises(PipelineError, match=r"'pipeline'.*kind is 'a spreadsheet'"):
        Pipeline.over_mailbox(box, ["a"])


def test_an_item_claim_names_the_consumer_that_took_the_item() -> None:
    box = fresh_box()
    pipe = Pipeline.over_mailbox(box, ["a"], stall_timeout=30)
    with pipe.producer("a") as out:
        out.put(b"one")
    with pipe.consumer("trainer-7") as items:
        assert list(items) == [b"one"]
    claim = ItemClaim.read(box, claim_key("a", 0))
    assert claim is not None
    assert (claim.owner, claim.state) == ("trainer-7", "delivered")


def test_a_producer_failure_is_rebuilt_from_its_end_record() -> None:
    box = fresh_box()
    pipe = Pipeline.over_mailbox(box, ["a"], stall_timeout=30)

    def produce_one_then_fail() -> None:
        with pipe.producer("a") as out:
            out.put(b"one")
            raise KeyError("missing shard")

    with pytest.raises(KeyError):
        produce_one_then_fail()
    end = End.read(box, end_key("a"))
    assert end is not None
    assert (end.status, end.count, end.by) == ("failed", 1, "a")
    with pytest.raises(ProducerFailedError, match="after putting 1 item") as caught:
        list(pipe.consumer())
    assert caught.value.error_type == "KeyError"


def test_a_producer_id_too_long_for_the_mailbox_keys_is_refused_up_front() -> None:
    box = fresh_box()
    longest = "p" * (box.max_key_bytes - len("producers//registered"))
    Pipeline.over_mailbox(box, [longest])  # every key of this id fits exactly
    with pytest.raises(ConfigurationError, match="too long for"):
        Pipeline.over_mailbox(fresh_box(), [longest + "p"])


def test_non_ascii_ids_work_end_to_end_on_every_backend(rig: Rig) -> None:
    url = rig.url()
    names = ["nœud-1", "生成器 2"]
    for name in names:
        pipe = open_pipe(url, names, rig.options)
        with pipe.producer(name) as out:
            out.put(payload(name, 0))
    got: list[tuple[str, int]] = []
    drain(open_pipe(url, names, rig.options), got)
    assert sorted(got) == sorted((name, 0) for name in names)
