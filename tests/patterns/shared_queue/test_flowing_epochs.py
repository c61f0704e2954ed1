"""Epochs that flow: ``shared_queue(..., epochs=range(n))``.

A learner that finds no unit of epoch k free, while units of k are in progress elsewhere,
claims units of k+1 at once; it keeps watching k and takes over a dead learner's units of
k; it never runs more than one epoch ahead of the oldest epoch with a unit in progress; and
every unit is done exactly once in every epoch.
"""

from __future__ import annotations

import os
import random
import signal
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

import pytest

from gradientmail import ConfigurationError, Mailbox, WorkerError
from gradientmail._record_codec import decode_record
from gradientmail.patterns._claims import parse_claim
from gradientmail.patterns._run_layout import RunLayout
from gradientmail.patterns.shared_queue import shared_queue
from tests.support.handoff_probe import WatchedBell, install
from tests.support.lifecycle_workers import (
    ITEMS_PER_UNIT,
    flowing_learner,
    read_flowing_log,
    units_of,
)
from tests.support.rigs import Rig

from .test_lifecycle import CTX, PROCESS_RIGS, pid_of, wait_until

#: Seconds after which a wait here is a hang.
HANG = 60.0


def done_in(box: Mailbox, epoch: int) -> list[str]:
    prefix = RunLayout(epoch).done
    return sorted(key[len(prefix) :] for key in box.list(prefix))


def assert_each_epoch_complete_once(box: Mailbox, count: int, epochs: int) -> None:
    """Every unit of every epoch has one completion record and a claim in the done state."""
    for epoch in range(epochs):
        layout = RunLayout(epoch)
        assert done_in(box, epoch) == sorted(units_of(count)), f"epoch {epoch}"
        for unit in units_of(count):
            record = parse_claim(box.get(layout.units + unit))
            assert record is not None
            assert record.extra.get("state") == "done", (epoch, unit, record)


def start(box: Mailbox, name: str, logs: Path, **kwargs: Any) -> BaseProcess:
    settings = {"count": 12, "epochs": 5, "lease": 1.5, "item_s": 0.01, **kwargs}
    proc = CTX.Process(
        target=flowing_learner,
        args=(box, name, settings["count"], str(logs / name), settings["epochs"]),
        kwargs={k: settings[k] for k in ("lease", "item_s", "hold") if k in settings},
        daemon=True,
    )
    proc.start()
    return proc


def items_by_epoch(logs: Path) -> Counter[tuple[int, str, int]]:
    return Counter(entry for path in logs.iterdir() for entry in read_flowing_log(str(path)))


# -- exactly once per epoch, with a learner killed and restarted ------------------------------


@pytest.mark.parametrize("rig_name", PROCESS_RIGS)
def test_three_learners_five_epochs_each_unit_once_per_epoch_with_a_kill_and_restart(
    request: pytest.FixtureRequest, rig_name: str, tmp_path: Path
) -> None:
    rig: Rig = request.getfixturevalue(rig_name)
    box, count, epochs = rig.fresh(), 12, 5
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    names = ["a", "b", "c"]
    procs = {name: start(box, name, first) for name in names}
    # The victim dies in the middle of the run: once it has delivered `at` items, or once
    # half of the run's items are delivered, whichever comes first. A learner of flowing
    # epochs lives until the last epoch ends, so it is still running at half the run, even
    # when it started late and the others took most of the units.
    at = random.Random(rig_name).randint(count // 2, 2 * count)
    victim = random.Random(rig_name).choice(names)
    half = count * ITEMS_PER_UNIT * epochs // 2

    def kill_point() -> bool:
        overall = sum(len(read_flowing_log(str(first / name))) for name in names)
        return len(read_flowing_log(str(first / victim))) >= at or overall >= half

    wait_until(kill_point, HANG, f"{victim} to reach {at} items, or the run half its items")
    assert procs[victim].is_alive(), "the victim was still running at the kill point"
    os.kill(pid_of(procs[victim]), signal.SIGKILL)
    procs[victim].join(timeout=30)
    restarted = start(box, victim, second)
    for name, proc in [*procs.items(), (victim, restarted)]:
        proc.join(timeout=240)
        if proc is not procs[victim]:
            assert proc.exitcode == 0, (name, proc.exitcode)
    assert_each_epoch_complete_once(box, count, epochs)
    every = {
        (e, u, k) for e in range(epochs) for u in units_of(count) for k in range(ITEMS_PER_UNIT)
    }
    items = items_by_epoch(first) + items_by_epoch(second)
    assert set(items) == every
    # Only units the killed incarnation delivered from, in that epoch, come twice.
    killed = {(e, u) for e, u, _ in read_flowing_log(str(first / victim))}
    assert {(e, u) for (e, u, _), n in items.items() if n > 1} <= killed


def test_threads_on_memory_each_unit_once_per_epoch_with_an_early_exit_and_restart(
    rig_memory: Rig,
) -> None:
    """memory:// is one process's store: its learners are threads, and the one that goes
    away leaves early (``break``) in the middle of the run and restarts with its id."""
    box, count, epochs = rig_memory.fresh(), 12, 5
    units = units_of(count)
    delivered: Counter[tuple[int, int]] = Counter()
    left_behind: set[tuple[int, int]] = set()  # delivered by the learner that left
    lock = threading.Lock()
    errors: list[BaseException] = []

    def learner(name: str, stop_after: int | None) -> None:
        try:
            with shared_queue(
                units, mailbox=box, learner_id=name, load=lambda u: [u], epochs=range(epochs)
            ) as q:
                for n, item in enumerate(q, 1):
                    with lock:
                        delivered[(q.epoch, item)] += 1
                        if stop_after is not None:
                            left_behind.add((q.epoch, item))
                    if n == stop_after:
                        break
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    leaver = threading.Thread(target=learner, args=("a", count))
    threads = [leaver] + [threading.Thread(target=learner, args=(n, None)) for n in "bc"]
    for thread in threads:
        thread.start()
    leaver.join(timeout=HANG)
    again = threading.Thread(target=learner, args=("a", None))
    again.start()
    for thread in [*threads, again]:
        thread.join(timeout=HANG)
        assert not thread.is_alive(), "a learner hung"
    assert not errors, errors
    assert_each_epoch_complete_once(box, count, epochs)
    assert set(delivered) == {(e, u) for e in range(epochs) for u in units.values()}
    twice = {key for key, n in delivered.items() if n > 1}
    assert twice <= left_behind, "only the units of the learner that left come twice"


# -- epoch k+1 starts early, and never k+2 --------------------------------------------------


def test_the_next_epoch_starts_while_a_unit_is_in_progress_and_never_the_one_after(
    box: Mailbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A slow learner holds a unit of epoch 0 until the fast one has delivered an item of
    epoch 1: without flowing epochs the fast one would wait for it, and the test would
    hang and fail. Then the fast one finishes epoch 1 and must not open epoch 2 (two
    epochs after the unit in progress): once it blocks, epoch 2 has no claim."""
    install(monkeypatch, [])
    units = units_of(4)
    slow_holds, fast_in_next, release = threading.Event(), threading.Event(), threading.Event()
    # Holds the fast learner at its first item of epoch 1 while the test reads its lease:
    # free, it could finish epoch 1 first, and its lease would then rightly name epoch 0 alone.
    looked = threading.Event()
    queues: dict[str, Any] = {}
    seen: dict[str, list[tuple[int, int]]] = {"slow": [], "fast": []}
    errors: list[BaseException] = []

    slow_unit: list[int] = []

    def slow_load(unit: int) -> Iterator[int]:
        if not slow_holds.is_set():
            slow_unit.append(unit)
            slow_holds.set()
            assert release.wait(HANG), "the test never released the slow unit"
        yield unit

    def learner(name: str, load: Callable[[int], Iterator[int]]) -> None:
        try:
            with shared_queue(units, mailbox=box, learner_id=name, load=load, epochs=range(3)) as q:
                queues[name] = q
                for item in q:
                    seen[name].append((q.epoch, item))
                    if name == "fast" and q.epoch == 1 and not fast_in_next.is_set():
                        fast_in_next.set()
                        assert looked.wait(HANG), "the test never looked at the lease"
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    slow = threading.Thread(target=learner, args=("slow", slow_load))
    slow.start()
    assert slow_holds.wait(HANG), "the slow learner never began a unit"
    fast = threading.Thread(target=learner, args=("fast", lambda u: iter([u])))
    fast.start()
    try:
        assert fast_in_next.wait(20), "epoch 1 did not start while epoch 0 was open"
        lease = decode_record(box.get("leases/fast")) or {}
        assert lease["epochs"] == [0, 1], "the lease names both open epochs"
        assert f"u{slow_unit[0]:03d}" not in done_in(box, 0), "the slow unit is in progress"
        looked.set()
        bell: WatchedBell = queues["fast"]._bell

        def fast_rests_in_epoch_0_alone() -> bool:
            lease = decode_record(box.get("leases/fast")) or {}
            return lease.get("epochs") == [0] and any(b.blocked for b in bell.buffers)

        wait_until(fast_rests_in_epoch_0_alone, HANG, "fast to finish epoch 1 and wait")
        assert list(box.list(RunLayout(2).base)) == [], "epoch 2 opened two epochs ahead"
    finally:
        looked.set()
        release.set()
        for thread in (slow, fast):
            thread.join(timeout=HANG)
    assert not errors, errors
    assert_each_epoch_complete_once(box, 4, 3)
    both = seen["slow"] + seen["fast"]
    assert sorted(both) == sorted((e, u) for e in range(3) for u in range(4))
    epochs_of_fast = [e for e, _ in seen["fast"]]
    assert epochs_of_fast == sorted(epochs_of_fast)


# -- a late death in epoch k -------------------------------------------------------------------


@pytest.mark.parametrize("rig_name", PROCESS_RIGS)
def test_a_learner_dying_in_epoch_0_while_the_other_is_in_epoch_1_has_its_unit_taken_over(
    request: pytest.FixtureRequest, rig_name: str, tmp_path: Path
) -> None:
    rig: Rig = request.getfixturevalue(rig_name)
    box, count = rig.fresh(), 6
    holding = tmp_path / "holding"
    victim = start(box, "victim", tmp_path, count=count, epochs=2, hold=str(holding))
    wait_until(holding.exists, 120, "the victim to begin its unit")
    unit = next(
        name for name, value in units_of(count).items() if str(value) == holding.read_text()
    )
    in_next, got = threading.Event(), []
    errors: list[BaseException] = []

    def survivor() -> None:
        try:
            with shared_queue(
                units_of(count),
                mailbox=box,
                learner_id="survivor",
                load=lambda u: [u],
                epochs=range(2),
                lease=1.5,
            ) as q:
                for item in q:
                    got.append((q.epoch, item))
                    if q.epoch == 1:
                        in_next.set()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    thread = threading.Thread(target=survivor)
    thread.start()
    try:
        assert in_next.wait(120), "the survivor did not go on to epoch 1"
    finally:
        os.kill(pid_of(victim), signal.SIGKILL)
    victim.join(timeout=30)
    thread.join(timeout=120)
    assert not thread.is_alive(), "the survivor hung"
    assert not errors, errors
    assert_each_epoch_complete_once(box, count, 2)
    record = parse_claim(box.get(RunLayout(0).units + unit))
    assert record is not None
    assert record.owner == "survivor"
    assert "victim" in record.extra["previous"]
    value = units_of(count)[unit]
    assert (0, value) in got, "the survivor trained the dead learner's unit of epoch 0"
    first_of_1 = got.index(next(g for g in got if g[0] == 1))
    assert got.index((0, value)) > first_of_1, "it was taken over after epoch 1 began"


# -- the spelling ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "names"),
    [
        ({"epochs": range(0)}, "non-empty"),
        ({"epochs": [0, 2, 1]}, "increase"),
        ({"epochs": [1, 1]}, "increase"),
        ({"epochs": [0, -1]}, "ints >= 0"),
        ({"epochs": 3}, "iterable"),
        ({"epochs": "01"}, "iterable"),
        ({"epochs": range(3), "epoch": 2}, "not both"),
    ],
)
def test_bad_epochs_are_refused_naming_the_fix(
    rig_memory: Rig, kwargs: dict[str, Any], names: str
) -> None:
    with (
        pytest.raises(ConfigurationError, match=names),
        shared_queue(
            {"u": 1}, mailbox=rig_memory.fresh(), learner_id="l", load=lambda u: [u], **kwargs
        ),
    ):
        pass


def test_a_resumed_flowing_run_skips_complete_epochs_and_says_complete(rig_memory: Rig) -> None:
    box = rig_memory.fresh()
    units = {f"u{i}": i for i in range(3)}
    with shared_queue(units, mailbox=box, learner_id="a", load=lambda u: [u], epoch=0) as q:
        assert sorted(q) == [0, 1, 2]
    with shared_queue(units, mailbox=box, learner_id="a", load=lambda u: [u], epochs=range(2)) as q:
        got = [(q.epoch, item) for item in q]
    assert sorted(got) == [(1, 0), (1, 1), (1, 2)]
    assert q.stats.run_complete
    assert q.stats.units_done_before == 3
    lease = decode_record(box.get("leases/a")) or {}
    assert lease["state"] == "finished"


def test_stats_sum_over_the_epochs_and_run_complete_waits_for_the_last(rig_memory: Rig) -> None:
    box = rig_memory.fresh()
    units = {f"u{i}": i for i in range(3)}
    with shared_queue(units, mailbox=box, learner_id="a", load=lambda u: [u], epochs=range(3)) as q:
        for _ in q:
            assert not q.stats.run_complete, "not before the last epoch ended"
    assert q.stats.run_complete
    assert q.stats.units_completed == q.stats.units_claimed == 9
    assert q.stats.items_delivered == 9


def test_leaving_early_releases_the_units_of_both_open_epochs(rig_memory: Rig) -> None:
    """A learner leaves while it holds a unit of epoch 0 (one item of it still to take)
    and units of epoch 1 it prefetched: every one of them is released at once, before the
    other learner moves, and the other then finishes both epochs."""
    box = rig_memory.fresh()
    units = units_of(2)
    release, holds = threading.Event(), threading.Event()

    def other_load(unit: int) -> Iterator[int]:
        holds.set()
        assert release.wait(HANG), "the test never released the other learner"
        yield from (unit, unit)

    errors: list[BaseException] = []

    def other() -> None:
        try:
            with shared_queue(
                units, mailbox=box, learner_id="o", load=other_load, epochs=range(2)
            ) as q:
                list(q)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    thread = threading.Thread(target=other)
    thread.start()
    try:
        assert holds.wait(HANG), "the other learner never began a unit"
        with shared_queue(
            units, mailbox=box, learner_id="a", load=lambda u: [u, u], epochs=range(2)
        ) as q:
            next(q)  # the first item of a's unit of epoch 0
            wait_until(q._open[0].dry.is_set, HANG, "a to find no unit of epoch 0 free")
            next(q)  # its second item: epoch 1 opens beside epoch 0
            assert len(q._open) == 2, "epoch 1 opened once epoch 0 had nothing free"
            wait_until(
                lambda: any(True for _ in box.list(RunLayout(1).units)), HANG, "a claim of epoch 1"
            )
        for epoch in (0, 1):
            layout = RunLayout(epoch)
            mine = [parse_claim(box.get(k)) for k in box.list(layout.units)]
            states = {c.extra["state"] for c in mine if c is not None and c.owner == "a"}
            assert states == {"released"}, (epoch, states)
        assert q.stats.units_released >= 2
    finally:
        release.set()
        thread.join(timeout=HANG)
    assert not errors, errors
    assert_each_epoch_complete_once(box, 2, 2)


def test_a_unit_taken_back_in_the_older_epoch_is_delivered_before_the_newer_epochs_items(
    rig_memory: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With items buffered in both open epochs, the older epoch's come first: a released
    unit of epoch 0, taken over while epoch 1's items wait, is delivered ahead of them."""
    install(monkeypatch, [])
    box = rig_memory.fresh()
    units = units_of(2)
    holds, give_up = threading.Event(), threading.Event()

    def other_load(unit: int) -> Iterator[int]:
        holds.set()
        assert give_up.wait(HANG), "the test never let the other learner give up"
        raise RuntimeError("the other learner gives its unit up")

    def other() -> None:
        with (
            pytest.raises(WorkerError),
            shared_queue(units, mailbox=box, learner_id="o", load=other_load, lease=3) as q,
        ):
            list(q)

    thread = threading.Thread(target=other)
    thread.start()
    assert holds.wait(HANG), "the other learner never began a unit"
    with shared_queue(
        units, mailbox=box, learner_id="a", load=lambda u: [u, u], epochs=range(2), lease=3
    ) as q:
        got = [next(q)]  # the first item of a's unit of epoch 0
        wait_until(q._open[0].dry.is_set, HANG, "a to find no unit of epoch 0 free")
        got.append(next(q))  # its second item; epoch 1 opens beside epoch 0
        newer = q._open[1]._buffer
        newer.next_item_ready()  # epoch 1's items wait in its buffer
        give_up.set()
        thread.join(timeout=HANG)  # the other learner released its unit of epoch 0
        got.append(next(q))
        assert q.epoch == 1, "nothing of epoch 0 was buffered yet"
        q._open[0]._buffer.next_item_ready()  # the released unit, taken over
        assert len(newer) > 0, "epoch 1 still has items buffered"
        got.append(next(q))
        assert q.epoch == 0, "the older epoch's item came before the newer one's"
        got.extend(q)
    assert sorted(got) == [0, 0, 0, 0, 1, 1, 1, 1]
    assert_each_epoch_complete_once(box, 2, 2)


def test_the_next_epoch_opens_only_once_no_unit_of_the_open_one_is_free(rig_memory: Rig) -> None:
    box = rig_memory.fresh()
    with shared_queue(
        units_of(20), mailbox=box, learner_id="a", load=lambda u: [u], epochs=range(2), prefetch=2
    ) as q:
        next(q)
        assert len(list(box.list(RunLayout(0).units))) < 20, "epoch 0 still has free units"
        lease = decode_record(box.get("leases/a")) or {}
        assert lease["epochs"] == [0], "epoch 1 is not open yet"
        assert len(q._open) == 1
        assert len(list(q)) == 39
    assert_each_epoch_complete_once(box, 20, 2)
