"""Waiting for the others: idle markers, who watches whom, and what may end an epoch."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from gradientmail import Mailbox, from_url
from gradientmail._record_codec import decode_record, encode_record
from gradientmail.patterns._leases import LeaseWatcher
from gradientmail.patterns._run_layout import LEASES_PREFIX, RunLayout
from gradientmail.patterns.shared_queue import shared_queue
from gradientmail.patterns.shared_queue._idle_markers import WATCHERS, IdleWatch
from gradientmail.patterns.shared_queue._unit_claims import UnitClaims
from tests.support.delegating import Delegating
from tests.support.rigs import Rig


def fresh_box() -> Mailbox:
    return from_url(f"memory://idle-{uuid.uuid4().hex}")


def watch(box: Mailbox, learner: str, epoch: int = 0) -> IdleWatch:
    watcher = LeaseWatcher(box, LEASES_PREFIX, duration=60.0)
    return IdleWatch(UnitClaims(box, RunLayout(epoch), learner, 1), watcher, period=20.0)


def lease(box: Mailbox, holder: str, state: str, epoch: int | None = 0) -> None:
    record: dict[str, Any] = {"holder": holder, "state": state, "lease": 60.0, "incarnation": 1}
    if epoch is not None:
        record["epoch"] = epoch
    box.put(LEASES_PREFIX + holder, encode_record(record))


def test_each_busy_learner_is_watched_by_exactly_two_of_the_idle_ones() -> None:
    box = fresh_box()
    idle = sorted(f"idle-{n}" for n in range(9))
    watchers = {name: watch(box, name) for name in idle}
    for holder in (f"busy-{n}" for n in range(50)):
        chosen = [name for name in idle if watchers[name]._watches(holder, idle)]
        assert len(chosen) == WATCHERS, (holder, chosen)
    few = idle[:2]  # as many idle learners as watchers: each watches everyone
    assert all(watchers[name]._watches("busy-0", few) for name in few)


def test_a_watcher_marks_learners_that_hold_nothing_of_this_epoch() -> None:
    box = fresh_box()
    me = watch(box, "me")
    lease(box, "me", "running")
    lease(box, "finished", "finished")
    lease(box, "elsewhere", "running", epoch=1)
    poll = me.poll()  # alone among the idle: it watches every busy learner
    assert poll.nobody_busy
    assert not poll.suspects
    marked = {key[len("idle/") :] for key in box.list("idle/")}
    assert marked == {"finished", "elsewhere"}
    why = decode_record(box.get("idle/elsewhere")) or {}
    assert why["by"] == "me"
    assert "epoch 1" in why["why"]


def test_a_learner_whose_epochs_flow_is_busy_in_both_its_open_epochs() -> None:
    """A lease names the open epochs (``epochs``) beside the oldest (``epoch``): its holder
    works in each of them, and in no other."""
    box = fresh_box()
    record = {"holder": "both", "state": "running", "lease": 60.0, "incarnation": 1}
    box.put(LEASES_PREFIX + "both", encode_record({**record, "epoch": 3, "epochs": [3, 4]}))
    for epoch, busy in [(3, True), (4, True), (5, False)]:
        me = watch(box, f"me-{epoch}", epoch)
        lease(box, f"me-{epoch}", "running", epoch=epoch)
        poll = me.poll()
        assert poll.nobody_busy is not busy, epoch
        assert ("both" in poll.absent) is not busy, epoch


def test_leases_below_the_learners_are_not_learners() -> None:
    box = fresh_box()
    me = watch(box, "me")
    lease(box, "me", "running")
    lease(box, "producers/p0", "running", epoch=None)  # a pipeline in the same mailbox
    assert me.poll().nobody_busy


def test_a_working_learner_stays_busy_and_one_that_left_is_a_suspect() -> None:
    box = fresh_box()
    me = watch(box, "me")
    lease(box, "me", "running")
    lease(box, "worker", "running", epoch=0)
    lease(box, "old", "running", epoch=None)  # a record without an epoch: assume this one
    lease(box, "leaver", "released")
    poll = me.poll()
    assert not poll.nobody_busy
    assert poll.suspects == ["leaver"]
    assert list(box.list("idle/")) == []  # nobody is marked before its units are taken


def test_settle_marks_a_suspect_only_once_it_is_gone() -> None:
    box = fresh_box()
    me = watch(box, "me")
    lease(box, "leaver", "released")
    me.poll()
    me.settle(["leaver"])
    assert list(box.list("idle/")) == ["idle/leaver"]


class CountingListings(Delegating):
    """Counts listings by prefix, and lets a test wait for a count."""

    def __init__(self, inner: Mailbox) -> None:
        super().__init__(inner)
        self.counts: dict[str, int] = {}
        self.changed = threading.Condition()

    def list(self, prefix: str = "", *, start_after: str | None = None) -> Iterator[str]:
        with self.changed:
            self.counts[prefix] = self.counts.get(prefix, 0) + 1
            self.changed.notify_all()
        if start_after is None:
            return self.inner.list(prefix)
        return self.inner.list(prefix, start_after=start_after)  # type: ignore[call-arg]

    def wait_for(self, prefix: str, count: int, timeout: float = 60) -> bool:
        with self.changed:
            return self.changed.wait_for(lambda: self.counts.get(prefix, 0) >= count, timeout)


@pytest.mark.parametrize("rig_name", ["rig_memory", "rig_file"])
def test_a_marker_planted_for_a_working_learner_does_not_end_the_epoch(
    request: pytest.FixtureRequest, rig_name: str
) -> None:
    rig: Rig = request.getfixturevalue(rig_name)
    box = rig.fresh()
    units = {"u0": 0}
    holding, release = threading.Event(), threading.Event()
    waiter_box = CountingListings(box)
    ended: dict[str, Any] = {}

    def holder() -> None:
        with shared_queue(units, mailbox=box, learner_id="holder", load=lambda u: [u]) as q:
            for _ in q:
                holding.set()
                release.wait(timeout=60)

    def waiter() -> None:
        with shared_queue(
            units,
            mailbox=waiter_box,  # type: ignore[arg-type]
            learner_id="waiter",
            load=lambda u: [u],
            lease=1.5,  # look again at the completions every 0.5 s while nothing changes
        ) as q:
            ended["items"] = list(q)
            ended["complete"] = q.stats.run_complete
            ended["done"] = len(list(box.list("done/")))

    first = threading.Thread(target=holder)
    first.start()
    assert holding.wait(timeout=60)
    box.put_if_absent("idle/holder", encode_record({"by": "a test", "at": time.time()}))
    second = threading.Thread(target=waiter)
    second.start()
    # The waiter lists done/ once when it starts, then to confirm the end whenever nobody
    # seems busy: the planted marker makes it confirm, and the confirmation must fail.
    assert waiter_box.wait_for("done/", 3)
    assert second.is_alive()
    assert "items" not in ended
    release.set()
    first.join(timeout=60)
    second.join(timeout=60)
    assert not second.is_alive()
    assert ended == {"items": [], "complete": True, "done": 1}


def test_one_idle_learner_leads_and_its_record_ends_the_epoch_for_the_others() -> None:
    box = fresh_box()
    names = [f"learner-{n}" for n in range(12)]
    watches = {name: watch(box, name, epoch=3) for name in names}
    for name in names:
        lease(box, name, "running", epoch=3)
        watches[name].mark()
    for name in names:
        assert watches[name].poll().nobody_busy
    leaders = [name for name in names if watches[name].leads()]
    assert len(leaders) == 1
    assert not any(w.ended() for w in watches.values())
    watches[leaders[0]].record_end(units=100)
    assert all(w.ended() for w in watches.values())
    assert list(box.list("epochs/3/complete")) == ["epochs/3/complete"]


def test_only_the_leader_lists_the_leases_again_before_the_end_and_finds_a_late_starter() -> None:
    """The claim loop's listing of the leases at its start counts as the watch's first.
    When nobody seems busy, only the leader (which would list done/) lists the leases
    again: there it finds a learner that started unseen, so the epoch is not confirmed
    while it works; the others wait for the leader and list nothing more."""
    box = fresh_box()
    names = [f"learner-{n}" for n in range(4)]
    boxes = {name: CountingListings(box) for name in names}
    watches: dict[str, IdleWatch] = {}
    for name in names:
        lease(box, name, "running")
    lease(box, "producers/p0", "running", epoch=None)  # a pipeline's: not a learner
    for name in names:
        watcher = LeaseWatcher(boxes[name], LEASES_PREFIX, duration=60.0)
        watches[name] = IdleWatch(
            UnitClaims(boxes[name], RunLayout(0), name, 1), watcher, period=20.0
        )
        assert watches[name].learners() == set(names)  # the claim loop's start asks this
        boxes[name].counts.clear()  # what follows is what the polls list
        watches[name].mark()
    lease(box, "late", "running")  # started after the others listed the leases
    polls = {name: watches[name].poll() for name in names}
    leaders = [name for name in names if watches[name].leads()]
    assert len(leaders) == 1
    for name in names:
        leader = name == leaders[0]
        assert boxes[name].counts.get(LEASES_PREFIX, 0) == (1 if leader else 0), name
        assert polls[name].nobody_busy is not leader, name


def test_a_marker_written_for_a_learner_that_left_does_not_lead() -> None:
    """A watcher marks a learner that left idle on its behalf; if that learner ranked first,
    the others used to wait a whole renewal period for a leader that would never list
    done/. The live idle learner of highest rank leads instead, and exactly one does."""
    box = fresh_box()
    names = [f"learner-{n}" for n in range(6)]
    watches = {name: watch(box, name) for name in names}
    for name in names:
        lease(box, name, "running")
        watches[name].mark()
    for name in names:
        watches[name].poll()
    (first,) = [name for name in names if watches[name].leads()]
    watches[first].marked = False  # it left: its marker now stands for it, as a watcher's would
    lease(box, first, "released")
    for name in names:
        watches[name]._observed.clear()  # observed again at the next renewal period
    rest = [name for name in names if name != first]
    leaders = [name for name in rest if watches[name].leads()]
    assert len(leaders) == 1, leaders
    lease(box, leaders[0], "running", epoch=1)  # the next leader moves to another epoch
    for name in rest:
        watches[name]._observed.clear()
    assert len([name for name in rest if name != leaders[0] and watches[name].leads()]) == 1
