"""A learner killed without leaving drops out of the group's batch within seconds.

Its ledger entry stays active for ``active_window`` (600 s by default); counted all that
while, its batch would keep every live learner's delta below its share and
``exchange.group_batch`` above the batch the group trains on. Liveness is observed on the
observer's own clock, driven here: no test waits for time.
"""

from __future__ import annotations

from contextlib import ExitStack

import pytest

torch = pytest.importorskip("torch")

from gradientmail import from_url  # noqa: E402
from gradientmail._exchange.layout import LearnerEntry  # noqa: E402
from gradientmail._exchange.liveness import FACTOR, FLOOR, Liveness  # noqa: E402
from gradientmail._exchange.pace import LearnerPace  # noqa: E402
from tests.support.clock import FakeClock  # noqa: E402
from tests.support.paced import learners, settle_paces  # noqa: E402


def entry(seq: int, step: float = 0.01, every: int = 1) -> LearnerEntry:
    """A ledger entry at count ``seq`` whose published steps take ``step`` seconds."""
    return LearnerEntry(
        seq=seq, pace=LearnerPace(batch=4, seconds_per_sample=step / 4, every=every)
    )


def test_a_count_that_stands_still_past_the_floor_is_no_longer_live() -> None:
    clock = FakeClock(start=0.0)
    liveness = Liveness(clock)
    assert liveness.live("b", entry(3)), "first seen"
    clock.advance(FLOOR)
    assert liveness.live("b", entry(3)), "still within the floor"
    clock.advance(0.01)
    assert not liveness.live("b", entry(3))
    assert liveness.live("b", entry(4)), "back at its next exchange"


@pytest.mark.parametrize(("step", "every"), [(0.5, 1), (0.05, 10)])
def test_the_limit_follows_the_published_step_time_and_every(step: float, every: int) -> None:
    clock = FakeClock(start=0.0)
    liveness = Liveness(clock)
    liveness.live("b", entry(1, step, every))
    clock.advance(FACTOR * step * every - 0.01)
    assert liveness.live("b", entry(1, step, every))
    clock.advance(0.02)
    assert not liveness.live("b", entry(1, step, every))


def test_the_limit_follows_the_intervals_observed_between_its_exchanges() -> None:
    """A slow store: the count moves every 2 s though a step takes 10 ms."""
    clock = FakeClock(start=0.0)
    liveness = Liveness(clock)
    for seq in range(5):
        assert liveness.live("b", entry(seq))
        clock.advance(2.0)
    clock.advance(FACTOR * 2.0 - 2.0 - 0.01)
    assert liveness.live("b", entry(4)), "ten intervals of its own"
    clock.advance(0.02)
    assert not liveness.live("b", entry(4))


def test_one_long_pause_it_came_back_from_counts_as_a_few_intervals() -> None:
    clock = FakeClock(start=0.0)
    liveness = Liveness(clock)
    for seq in range(5):
        liveness.live("b", entry(seq))
        clock.advance(0.2)
    clock.advance(60.0)
    assert liveness.live("b", entry(5)), "back"
    clock.advance(4.0)  # the usual interval grew to at most 0.2 + 0.2 * 0.6 = 0.32 s
    assert not liveness.live("b", entry(5))


def test_a_count_observed_across_several_exchanges_at_once_is_per_exchange() -> None:
    clock = FakeClock(start=0.0)
    liveness = Liveness(clock)
    liveness.live("b", entry(0))
    clock.advance(2.0)
    liveness.live("b", entry(10))  # ten exchanges in 2 s: 0.2 s each
    clock.advance(FACTOR * 0.2 + 0.01)
    assert not liveness.live("b", entry(10))


def test_a_learner_killed_without_leaving_leaves_the_group_batch_and_comes_back() -> None:
    """Paces 1, 2, 4 and 4: batches 4, 2, 1 and 1, a group batch of 8; with ``d`` silent,
    7, and each live learner's share of it grows."""
    with ExitStack() as stack:
        group = {x.name: x for x in learners(from_url("memory://liveness-group"), stack)}
        seen = {name: FakeClock(start=0.0) for name in group}
        for name, learner in group.items():  # liveness on clocks of its own, moved below
            learner.exchange._handoff.applier.liveness = Liveness(seen[name])
        settle_paces(list(group.values()))
        live = [group[n] for n in "abc"]
        for learner in live:  # each reads d's last count (d stepped last)
            learner.step()
        for clock in seen.values():
            clock.advance(FLOOR / 2)
        for learner in live:
            learner.step()
        assert {x.name: x.exchange.group_batch for x in live} == dict.fromkeys("abc", 8)
        for clock in seen.values():
            clock.advance(FLOOR)  # d's count stood still for 1.5 s
        for _ in range(2):  # read d's silence, then adopt what was read
            for learner in live:
                learner.step()
        assert {x.name: x.exchange.group_batch for x in live} == dict.fromkeys("abc", 7)
        assert {x.name: x.exchange.batch_size for x in live} == {"a": 4, "b": 2, "c": 1}
        group["d"].step()  # back
        for _ in range(2):
            for learner in live:
                learner.step()
        assert {x.name: x.exchange.group_batch for x in live} == dict.fromkeys("abc", 8)
