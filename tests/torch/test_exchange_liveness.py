"""A learner killed without leaving drops out of the group's batch once the model moves on.

Its ledger entry stays active for ``active_window`` (600 s by default); counted all that
while, its batch would keep every live learner's delta below its share and
``exchange.group_batch`` above the batch the group trains on. Silence is counted in the
shared model's versions, so when every learner stops at once nobody is taken for dead.
"""

from __future__ import annotations

from contextlib import ExitStack

import pytest

torch = pytest.importorskip("torch")

from gradientmail import from_url  # noqa: E402
from gradientmail._exchange.layout import LearnerEntry  # noqa: E402
from gradientmail._exchange.liveness import FACTOR, Liveness, expected_versions  # noqa: E402
from gradientmail._exchange.pace import LearnerPace  # noqa: E402
from tests.support.paced import learners, settle_paces  # noqa: E402


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
