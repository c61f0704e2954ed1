"""A learner killed without leaving drops out of the group's batch once the model moves on.

Its ledger entry stays active for ``active_window`` (600 s by default); counted all that
while, its batch would keep every live learner's delta below its share and
``exchange.group_batch`` above the batch the group trains on. Silence is counted in the
shared model's versions, so when every learner stops at once nobody is taken for dead.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from gradientmail import from_url  # noqa: E402
from gradientmail._exchange.layout import LearnerEntry  # noqa: E402
from gradientmail._exchange.liveness import FACTOR, Liveness, expected_versions  # noqa: E402
from gradientmail._exchange.pace import LearnerPace  # noqa: E402
from gradientmail.mailbox import Mailbox  # noqa: E402
from tests.support.exchange_workers import recipe_steps, reports  # noqa: E402
from tests.support.paced import learners, settle_paces  # noqa: E402
from tests.support.polling import wait_until  # noqa: E402
from tests.support.rigs import Rig  # noqa: E402

CTX = mp.get_context("spawn")


def entry(seq: int, step: float = 0.01, every: int = 1) -> LearnerEntry:
    """A ledger entry at count ``seq`` whose published steps take ``step`` seconds."""
    pace = LearnerPace(batch=4, seconds_per_sample=step / 4, every=every)
    return LearnerEntry(seq=seq, pace=pace)


def moves(liveness: Liveness, versions: list[int], expected: float = 0.0) -> int:
    """``b`` exchanges once at each of ``versions`` (first seen at the first); its count."""
    for seq, version in enumerate(versions):
        assert liveness.live("b", entry(seq), version, expected)
    return len(versions) - 1


def test_a_count_that_stands_still_while_the_model_moves_on_is_no_longer_live() -> None:
    liveness = Liveness()
    seq = moves(liveness, [0])
    assert liveness.live("b", entry(seq), int(FACTOR), 0.0), "ten versions: one each"
    assert not liveness.live("b", entry(seq), int(FACTOR) + 1, 0.0)
    assert liveness.live("b", entry(seq + 1), int(FACTOR) + 2, 0.0), "back"


def test_when_nobody_exchanges_nobody_is_taken_for_dead() -> None:
    """The store out for a minute, an evaluation at the same step everywhere, the job
    suspended: however long, the head stays where it was."""
    liveness = Liveness()
    seq = moves(liveness, [0, 5, 10, 15])
    for _ in range(1000):
        assert liveness.live("b", entry(seq), 15, 0.0)
    assert liveness.live("b", entry(seq), 16, 0.0), "and not at the first version after"


def test_the_limit_follows_the_versions_its_pace_implies() -> None:
    liveness = Liveness()
    seq = moves(liveness, [0], expected=8.0)
    assert liveness.live("b", entry(seq), int(FACTOR * 8), 8.0)
    assert not liveness.live("b", entry(seq), int(FACTOR * 8) + 1, 8.0)


def test_the_limit_follows_the_versions_observed_between_its_exchanges() -> None:
    """First seen, then exchanging every 5 versions: usually 5, not the partial first gap."""
    liveness = Liveness()
    seq = moves(liveness, [0, 1, 6, 11, 16, 21])
    assert liveness.live("b", entry(seq), 21 + int(FACTOR * 5), 0.0)
    assert not liveness.live("b", entry(seq), 21 + int(FACTOR * 5) + 1, 0.0)


def test_one_long_pause_it_came_back_from_counts_as_a_few_intervals() -> None:
    liveness = Liveness()
    seq = moves(liveness, [0, 1, 3, 5, 7, 107])  # usually 2, then 100
    # the usual interval grew to 2 + 0.2 * (4 * 2 - 2) = 3.2 versions, not to 21.6
    assert not liveness.live("b", entry(seq), 107 + 33, 0.0)


def test_several_exchanges_seen_at_once_are_counted_each() -> None:
    liveness = Liveness()
    liveness.live("b", entry(0), 0, 0.0)
    liveness.live("b", entry(1), 1, 0.0)
    liveness.live("b", entry(11), 21, 0.0)  # ten exchanges in 20 versions: 2 each
    assert not liveness.live("b", entry(11), 21 + int(FACTOR * 2) + 1, 0.0)


def test_the_versions_expected_follow_the_group_rate_and_each_learners_every() -> None:
    entries = {
        "a": entry(0, step=1.0),
        "b": entry(0, step=1.0),
        "c": entry(0, step=1.0, every=10),  # 0.1 exchanges a second
        "new": LearnerEntry(seq=0),  # no pace yet: adds nothing, expects nothing
    }
    assert expected_versions(entries) == pytest.approx({"a": 2.1, "b": 2.1, "c": 21.0, "new": 0})


def test_a_learner_killed_without_leaving_leaves_the_group_batch_and_comes_back() -> None:
    """Paces 1, 2, 4 and 4: batches 4, 2, 1 and 1, a group batch of 8, and one version per
    learner per round; with ``d`` silent past ten rounds of four versions, 7."""
    with ExitStack() as stack:
        group = {x.name: x for x in learners(from_url("memory://liveness-group"), stack)}
        settle_paces(list(group.values()))
        live = [group[n] for n in "abc"]
        for _ in range(int(FACTOR * 4 / 3) - 2):  # up to 38 versions without d
            for learner in live:
                learner.step()
        assert {x.name: x.exchange.group_batch for x in live} == dict.fromkeys("abc", 8)
        for _ in range(5):  # past 40: d is read as gone, then what was read is adopted
            for learner in live:
                learner.step()
        assert {x.name: x.exchange.group_batch for x in live} == dict.fromkeys("abc", 7)
        assert {x.name: x.exchange.batch_size for x in live} == {"a": 4, "b": 2, "c": 1}
        group["d"].step()  # back
        for _ in range(2):
            for learner in live:
                learner.step()
        assert {x.name: x.exchange.group_batch for x in live} == dict.fromkeys("abc", 8)


def test_who_is_left_out_and_back_is_logged_once_each(caplog: pytest.LogCaptureFixture) -> None:
    liveness = Liveness()
    seq = moves(liveness, [0])
    with caplog.at_level("INFO", logger="gradientmail.exchange"):
        for version in range(int(FACTOR) + 1, int(FACTOR) + 4):
            liveness.live("b", entry(seq), version, 0.0)
        liveness.live("b", entry(seq + 1), int(FACTOR) + 5, 0.0)
    messages = [r.getMessage() for r in caplog.records]
    assert messages == [
        "learner 'b' made no exchange while the shared model moved on from version 0: left "
        "out of the group's batch until it exchanges again",
        "learner 'b' exchanges again: back in the group's batch",
    ]


# -- real processes ---------------------------------------------------------------------------
#
# Three learner processes at the same pace, each asked for at most 4 items a step: the group's
# batch is above 8 exactly while a learner counts all three, and at most 8 once it counts two.


class Group:
    """Learner processes ``a``, ``b`` and ``victim`` training with the recipe on one store,
    each reporting its steps and group batch to a file under ``tmp``."""

    def __init__(self, box: Mailbox, tmp: Path) -> None:
        self.tmp = tmp
        self.stop = str(tmp / "stop")
        self.procs = {
            name: CTX.Process(
                target=recipe_steps, args=(box, name, str(tmp / name), self.stop, 0.005)
            )
            for name in ("a", "b", "victim")
        }
        for proc in self.procs.values():
            proc.start()

    def last(self, name: str) -> dict[str, Any]:
        lines = reports(str(self.tmp / name))
        return lines[-1] if lines else {"steps": 0, "group_batch": 0.0}

    def survivors_see(self, condition: Any, what: str) -> list[int]:
        """Wait until ``a`` and ``b`` each report a group batch meeting ``condition``; the
        step at which each first did, after the steps they had made when called."""
        start = {name: self.last(name)["steps"] for name in ("a", "b")}
        wait_until(
            lambda: all(condition(self.last(name)["group_batch"]) for name in start), 120, what
        )
        return [
            next(
                r["steps"]
                for r in reports(str(self.tmp / name))[start[name] :]
                if condition(r["group_batch"])
            )
            - start[name]
            for name in start
        ]

    def finish(self) -> None:
        Path(self.stop).touch()
        for name in ("a", "b"):
            self.procs[name].join(timeout=120)
            assert self.procs[name].exitcode == 0, name


def counts_three(group_batch: float) -> bool:
    return group_batch > 8


def counts_two(group_batch: float) -> bool:
    return group_batch <= 8


def test_a_learner_process_killed_without_leaving_leaves_the_others_group_batch(
    rig_file: Rig, tmp_path: Path
) -> None:
    """Its ledger entry stays active for ten minutes; the survivors stop counting it within
    a few dozen of their steps, and go on training."""
    group = Group(rig_file.fresh(), tmp_path)
    try:
        wait_until(
            lambda: all(counts_three(group.last(n)["group_batch"]) for n in ("a", "b", "victim")),
            120,
            "every learner counting all three",
        )
        os.kill(group.procs["victim"].pid or 0, signal.SIGKILL)
        group.procs["victim"].join(timeout=60)
        steps = group.survivors_see(counts_two, "the survivors leaving the killed learner out")
        assert max(steps) <= 100, steps  # ten rounds of three versions, about 15 steps each
        before = {name: group.last(name)["steps"] for name in ("a", "b")}
        wait_until(
            lambda: all(group.last(n)["steps"] > s + 20 for n, s in before.items()),
            120,
            "the survivors training on",
        )
        assert all(counts_two(group.last(name)["group_batch"]) for name in ("a", "b"))
    finally:
        group.procs["victim"].kill()
        group.finish()


def test_a_stopped_learner_process_leaves_the_group_batch_and_is_back_when_resumed(
    rig_gcs: Rig, tmp_path: Path
) -> None:
    """SIGSTOP, then SIGCONT (a node suspended and resumed). On a store whose swaps the
    server decides, a client stopped mid-request holds nothing, so the others go on."""
    group = Group(rig_gcs.fresh(), tmp_path)
    victim = group.procs["victim"].pid or 0
    try:
        wait_until(
            lambda: all(counts_three(group.last(n)["group_batch"]) for n in ("a", "b", "victim")),
            120,
            "every learner counting all three",
        )
        os.kill(victim, signal.SIGSTOP)
        group.survivors_see(counts_two, "the survivors leaving the stopped learner out")
        os.kill(victim, signal.SIGCONT)
        group.survivors_see(counts_three, "the survivors counting the resumed learner again")
    finally:
        os.kill(victim, signal.SIGCONT)
        Path(group.stop).touch()
        group.procs["victim"].join(timeout=120)
        group.finish()
    assert group.procs["victim"].exitcode == 0
