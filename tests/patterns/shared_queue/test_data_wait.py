"""The data-wait figure: a Session publishes how long its loop waited for data, and
``gradientmail status`` shows it per learner as "data wait %"."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from gradientmail import Mailbox, from_url
from gradientmail._cli import main
from gradientmail.patterns.shared_queue import shared_queue
from gradientmail.session import Session
from gradientmail.status import RunStatus, data_wait_share, format_status, read_status
from tests.support.handoff_probe import WatchedBuffer, install
from tests.support.rigs import Rig

UNITS = {f"u{i:02d}": i for i in range(6)}
ITEM_S = 0.02


def slow_load(unit: int) -> Iterator[int]:
    for k in range(3):
        time.sleep(ITEM_S)  # the store or disk is slow: the workload, not synchronisation
        yield unit * 10 + k


def fast_load(unit: int) -> Iterator[int]:
    yield from (unit * 10 + k for k in range(3))


@pytest.fixture
def buffers(monkeypatch: pytest.MonkeyPatch) -> list[WatchedBuffer]:
    """The buffers of the queues this test opens, watched (the last is the newest)."""
    made: list[WatchedBuffer] = []
    install(monkeypatch, made)
    return made


def starving_load(
    buffers: list[WatchedBuffer], inside: list[float]
) -> Callable[[int], Iterator[int]]:
    """A loader slower than its consumer, provably: it makes each item only once the
    consumer is blocked on the empty buffer, so the consumer waits for every item, and the
    stretch it spends making the item (appended to ``inside``) lies within that wait."""

    def load(unit: int) -> Iterator[int]:
        for k in range(3):
            began = buffers[-1].consumer_blocked()
            time.sleep(ITEM_S)  # the store or disk is slow: the workload, not synchronisation
            inside.append(time.perf_counter() - began)
            yield unit * 10 + k

    return load


def timed_next(iterator: Iterator[Any]) -> tuple[list[Any], float]:
    """Every item of ``iterator``, and the seconds spent inside its ``next()`` calls."""
    got: list[Any] = []
    in_next = 0.0
    while True:
        began = time.perf_counter()
        try:
            got.append(next(iterator))
        except StopIteration:
            break
        finally:
            in_next += time.perf_counter() - began
    return got, in_next


def record(box: Mailbox, learner: str) -> dict[str, Any]:
    return json.loads(box.get(f"learners/{learner}"))  # type: ignore[no-any-return]


def test_the_queue_reports_its_wait_to_the_session_which_publishes_it(
    rig_memory: Rig, buffers: list[WatchedBuffer]
) -> None:
    box = rig_memory.fresh()
    inside: list[float] = []
    load = starving_load(buffers, inside)
    with (
        Session(box, "starving", publish_every=60) as session,
        shared_queue(UNITS, mailbox=box, learner_id="starving", load=load) as items,
    ):
        for _ in items:
            pass
        waited = items.stats.wait_s
    assert len(inside) == 3 * len(UNITS)
    assert 0.0 < sum(inside) <= waited, "the consumer waited for every item"
    # Every wait the consumer had was reported, and nothing else.
    assert session.data_wait_s == pytest.approx(waited, rel=1e-9)
    assert record(box, "starving")["data_wait_s"] == pytest.approx(waited, rel=1e-9)


def lone_run(
    box: Mailbox,
    name: str,
    load: Any,
    step: Callable[[], None] = lambda: None,
    wait_for_others: bool = True,
) -> RunStatus:
    """One learner over its own run, calling ``step`` before each ``next()``; the status
    read after it finished."""
    with (
        Session(box, name, publish_every=60),
        shared_queue(
            UNITS, mailbox=box, learner_id=name, load=load, wait_for_others=wait_for_others
        ) as items,
    ):
        while True:
            step()
            try:
                next(items)
            except StopIteration:
                break
    return read_status(box)


def test_status_tells_a_starving_learner_from_a_fed_one(
    rig_memory: Rig, buffers: list[WatchedBuffer]
) -> None:
    inside: list[float] = []
    starving = lone_run(rig_memory.fresh(), "starving", starving_load(buffers, inside))
    # The fed learner's step lasts until its loader has the next item buffered (and, as it
    # has no one to wait for, queues the end as soon as the last unit is loaded): every
    # next() finds its item there, so its loop never waits.
    fed = lone_run(
        rig_memory.fresh(),
        "fed",
        fast_load,
        step=lambda: buffers[-1].next_item_ready(),
        wait_for_others=False,
    )
    starving_share = data_wait_share(starving.learners[0], starving.now)
    fed_share = data_wait_share(fed.learners[0], fed.now)
    assert starving_share is not None
    assert fed_share is not None
    # The starving loop waited for every item, and its record holds all of that wait; the
    # fed loop never waited, and its record says so exactly.
    assert len(inside) == 3 * len(UNITS)
    assert 0.0 < sum(inside) <= starving.learners[0]["data_wait_s"]
    assert starving_share > 0.0
    assert fed.learners[0]["data_wait_s"] == 0.0
    assert fed_share == 0.0
    text = format_status(starving)
    header, _, row = text.splitlines()[:3]
    assert "data wait %" in header
    column = header.index("data wait %")
    assert float(row[column:].split()[0]) == pytest.approx(100 * starving_share, abs=0.05)


def test_the_figure_is_the_share_of_the_time_until_the_last_report() -> None:
    running = {"started_at": 1000.0, "updated_at": 1100.0, "data_wait_s": 25.0}
    assert data_wait_share(running, now=5000.0) == pytest.approx(0.25)
    finished = {**running, "finished_at": 1050.0}
    assert data_wait_share(finished, now=5000.0) == pytest.approx(0.5)
    assert data_wait_share({"started_at": 1000.0}, now=2000.0) is None  # an older record
    row = {"learner": "rank0", "state": "running", **running}
    status = RunStatus(now=1100.0, total=4, claimed=0, learners=[row])
    lines = format_status(status).splitlines()
    assert "data wait %" in lines[0]
    assert " 25.0 " in lines[2]
    old = RunStatus(now=1100.0, total=4, claimed=0, learners=[{"learner": "l", "state": "x"}])
    column = format_status(old).splitlines()[0].index("data wait %")
    assert format_status(old).splitlines()[2][column] == "-"


def test_timed_measures_the_loop_and_does_not_count_the_queue_twice(
    rig_memory: Rig, buffers: list[WatchedBuffer]
) -> None:
    box = rig_memory.fresh()
    inside: list[float] = []
    load = starving_load(buffers, inside)
    with (
        Session(box, "timed", publish_every=60) as session,
        shared_queue(UNITS, mailbox=box, learner_id="timed", load=load) as items,
    ):
        got, in_next = timed_next(session.timed(items))
        queue_wait = items.stats.wait_s
    assert len(got) == len(inside) == 3 * len(UNITS)
    # timed() saw at least what the queue waited (which holds every stretch the loader
    # spent making an item), and the queue's reports were not added on top of it (which
    # would push the total past the time the loop spent in next()).
    assert session.data_wait_s >= queue_wait >= sum(inside) > 0.0
    assert session.data_wait_s <= in_next


def test_timed_over_any_iterable_counts_the_wait_for_each_item(rig_memory: Rig) -> None:
    session = Session(rig_memory.fresh(), "loader", publish_every=60)
    inside: list[float] = []  # each batch's making, measured inside the iterable

    def batches() -> Iterator[int]:
        for n in range(3):
            began = time.perf_counter()
            time.sleep(ITEM_S)  # a slow DataLoader, the workload
            inside.append(time.perf_counter() - began)
            yield n

    with session:
        got, in_next = timed_next(session.timed(batches()))
    assert got == [0, 1, 2]
    # Each batch's making lies inside the next() that waited for it: the data wait holds
    # all three, and no more than the time spent in next().
    assert len(inside) == 3
    assert 0.0 < sum(inside) <= session.data_wait_s <= in_next


def test_the_cli_prints_the_column(rig_file: Rig, capsys: pytest.CaptureFixture[str]) -> None:
    url = rig_file.url()
    lone_run(from_url(url), "a", slow_load)
    assert main(["status", url]) == 0
    assert "data wait %" in capsys.readouterr().out
