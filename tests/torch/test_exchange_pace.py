"""The exchange's pace rules on a driven clock: speed measured, work sized, deltas weighted."""

from __future__ import annotations

import pytest

from gradientmail._exchange.pace import GroupPace, LearnerPace, Pace
from gradientmail._exchange.rules import Average, OuterStep
from tests.support.clock import FakeClock


def paced(clock: FakeClock, seconds_per_sample: float, batch: int, steps: int) -> Pace:
    pace = Pace(clock)
    for _ in range(steps):
        clock.advance(seconds_per_sample * batch)
        pace.stepped(batch)
    return pace


def test_pace_is_seconds_per_sample_between_steps() -> None:
    clock = FakeClock()
    pace = Pace(clock)
    pace.stepped(16)  # the first step only starts the clock: its start is unknown
    assert pace.seconds_per_sample == 0
    clock.advance(0.064)
    pace.stepped(16)
    assert pace.seconds_per_sample == pytest.approx(0.004)
    clock.advance(0.016)  # a batch of 8 at twice the speed
    pace.stepped(8)
    # An average of 0.2 of the newest interval: 0.8 x 0.004 + 0.2 x 0.002.
    assert pace.seconds_per_sample == pytest.approx(0.0036)


def test_a_slowdown_shows_within_ten_steps_and_a_pause_does_not_swamp_it() -> None:
    clock = FakeClock()
    pace = paced(clock, 0.004, 16, 20)
    assert pace.seconds_per_sample == pytest.approx(0.004)
    clock.advance(30.0)  # an evaluation, a checkpoint: one long interval
    pace.stepped(16)
    # One pause counts as one step 4x as slow (the cap): 0.8 x 0.004 + 0.2 x 0.016.
    assert pace.seconds_per_sample == pytest.approx(0.0064), "a pause swamped the pace"
    pace = paced(clock, 0.004, 16, 20)
    for _ in range(10):
        clock.advance(0.012 * 16)
        pace.stepped(16)
    assert pace.seconds_per_sample > 0.012 * 0.85


def test_restart_forgets_the_last_step() -> None:
    clock = FakeClock()
    pace = paced(clock, 0.004, 16, 5)
    clock.advance(100.0)
    pace.restart()
    pace.stepped(16)
    assert pace.seconds_per_sample == pytest.approx(0.004)


def group(paces: dict[str, tuple[int, float]], me: str, every: int = 1) -> GroupPace:
    entries = {k: LearnerPace(b, s, every) for k, (b, s) in paces.items()}
    return GroupPace(entries, me, entries[me])


PACES_1224 = {"a": (16, 0.004), "b": (16, 0.008), "c": (16, 0.008), "d": (16, 0.016)}


@pytest.mark.parametrize(("me", "batch"), [("a", 16), ("b", 8), ("c", 8), ("d", 4)])
def test_each_learner_takes_a_batch_in_proportion_to_its_speed(me: str, batch: int) -> None:
    assert group(PACES_1224, me).batch_for(16) == batch


def test_a_batch_is_at_least_one_and_at_most_batch_size() -> None:
    assert group({"a": (16, 0.001), "z": (1, 1.0)}, "z").batch_for(16) == 1
    assert group({"a": (16, 0.004), "b": (16, 0.008)}, "a").batch_for(16) == 16


def test_unmeasured_learners_count_from_their_first_measurement() -> None:
    paces = {"a": LearnerPace(16, 0.008, 1), "new": LearnerPace(16, 0.0, 1)}
    assert GroupPace(paces, "a", paces["a"]).batch_for(16) == 16
    assert GroupPace.alone("a", LearnerPace(16, 0.0, 1)).batch_for(16) == 16


def test_a_learner_alone_keeps_all_of_its_progress() -> None:
    assert group({"a": (16, 0.004)}, "a").share(16) == 1.0


def test_equal_learners_average() -> None:
    equal = dict.fromkeys("abcd", (16, 0.004))
    assert group(equal, "a").share(16) == pytest.approx(0.25)
    assert group(equal, "a").expected_staleness() == pytest.approx(3.0)


def test_speed_proportional_batches_weigh_by_samples() -> None:
    sized = {"a": (16, 0.004), "b": (8, 0.008), "c": (8, 0.008), "d": (4, 0.016)}
    g = group(sized, "d")
    assert g.group_batch() == pytest.approx(36)
    assert g.share(4) == pytest.approx(4 / 36)
    assert g.expected_staleness() == pytest.approx(3.0), "equal step times: N - 1"


def test_equal_batches_at_unequal_speeds_move_one_fast_step_per_step_time() -> None:
    g = group(PACES_1224, "a")
    # per fast step time: 1 + 1/2 + 1/2 + 1/4 deltas of weight 16/36 each
    assert g.share(16) * (1 + 0.5 + 0.5 + 0.25) == pytest.approx(1.0)
    assert group(PACES_1224, "d").expected_staleness() == pytest.approx(4 + 2 + 2)
    assert group(PACES_1224, "a").expected_staleness() == pytest.approx(1.25)


def test_a_learner_that_slows_is_resized_from_what_it_measures() -> None:
    clock = FakeClock()
    mine = paced(clock, 0.004, 16, 20)
    others = {"b": LearnerPace(8, 0.008, 1), "c": LearnerPace(8, 0.008, 1)}

    def batch() -> int:
        me = LearnerPace(16, mine.seconds_per_sample, 1)
        return GroupPace({**others, "a": me}, "a", me).batch_for(16)

    assert batch() == 16
    for _ in range(15):  # another job lands on this GPU: three times slower
        clock.advance(0.012 * 16)
        mine.stepped(16)
    assert batch() == round(16 * 0.008 / mine.seconds_per_sample) < 12


def test_a_delta_as_stale_as_the_paces_make_normal_keeps_its_share_and_a_staler_one_less() -> None:
    step = OuterStep(Average(), staleness=0.5, max_staleness=None)
    share = 4 / 36
    # four learners: the rule divides by 4, the share replaces that 1/4
    assert step.weight(3, 4, share, expected=3.0) == pytest.approx(share * 4)
    assert step.weight(1, 4, share, expected=3.0) == pytest.approx(share * 4), "fresher: whole"
    assert step.weight(15, 4, share, expected=3.0) == pytest.approx(share * 4 * (4 / 16) ** 0.5)
    unweighted = OuterStep(Average(), staleness=None, max_staleness=None)
    assert unweighted.weight(15, 4, share, expected=3.0) == pytest.approx(share * 4)
