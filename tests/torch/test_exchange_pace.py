"""The exchange's pace rules on a driven clock: speed measured, work sized, deltas weighted."""

from __future__ import annotations

import math
import random
from collections.abc import Callable

import pytest

from gradientmail._exchange.pace import GroupPace, LearnerPace, Pace, Work
from gradientmail._exchange.rules import Average, OuterStep
from gradientmail._exchange.step_cost import StepCost
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


# -- a step's fixed cost: what no item adds ---------------------------------------------------


def measured_cost(steps: list[tuple[int, float]]) -> StepCost:
    cost = StepCost()
    for batch, seconds in steps:
        cost.stepped(batch, seconds)
    return cost


def test_steps_that_cost_in_proportion_to_their_items_show_no_fixed_part() -> None:
    cost = measured_cost([(16, 0.064)] * 3 + [(8, 0.032)] * 3 + [(4, 0.016)] * 10)
    assert cost.items == pytest.approx(0.0, abs=1e-6)


def test_a_fixed_part_is_measured_in_items_and_a_whole_gpu_slowing_keeps_it() -> None:
    # 40 ms of launches and updates, then 4 ms an item: the fixed part is 10 items' worth.
    steps = [(b, 0.040 + 0.004 * b) for b in (16, 11, 9, 7, 5, 4, 3, 2, 2, 2)]
    assert measured_cost(steps).items == pytest.approx(10.0)
    assert measured_cost([(b, 3 * t) for b, t in steps]).items == pytest.approx(10.0)


@pytest.mark.parametrize("seed", range(6))
def test_jittered_proportional_steps_are_not_taken_for_a_fixed_cost(seed: int) -> None:
    noise = random.Random(seed)
    cost = StepCost()
    seen = []
    for _ in range(400):  # a batch wandering from 4 to 8, each step off by about 10 %
        batch = noise.randint(4, 8)
        cost.stepped(batch, 0.016 * batch * math.exp(noise.gauss(0, 0.1)))
        seen.append(cost.items)
    assert max(seen) < 4, "noise alone raised a learner's batch above its share"
    assert min(seen) == 0, "a fixed part below 0 is none"


def test_a_gpu_that_slows_while_its_batch_shrinks_is_not_taken_for_a_fixed_cost() -> None:
    # In proportion throughout: 1 ms an item, then 6 ms once another job lands on the GPU,
    # and its batch shrinks from 4 to 1 as its pace catches up. No line through both speeds
    # describes these steps, so they show no fixed part.
    steps = [(4, 0.004)] * 30 + [(4, 0.024)] * 3 + [(3, 0.018), (2, 0.012)] + [(1, 0.006)] * 10
    assert measured_cost(steps).items == 0


def test_stalls_every_few_steps_are_left_out_of_the_fit() -> None:
    # 40 ms fixed and 4 ms an item, and every 8th step 150 ms more (a log flush, a
    # loader's hiccup, an exchange's copies): the stalls are not the line.
    batches = [16, 11, 9, 7, 5, 4, 3, 2] * 6
    steps = [(b, 0.040 + 0.004 * b + (0.150 if i % 8 == 7 else 0)) for i, b in enumerate(batches)]
    assert measured_cost(steps).items == pytest.approx(10.0)


def test_a_step_time_no_clock_gives_is_left_out() -> None:
    steps = [(b, 0.040 + 0.004 * b) for b in (16, 11, 9, 7, 5, 4, 3, 2)]
    cost = measured_cost([*steps[:4], (5, math.nan), (4, math.inf), (3, -1.0), *steps[4:]])
    assert cost.items == pytest.approx(10.0)


def test_a_sudden_fall_in_batch_is_measured_at_its_real_step_time() -> None:
    # Paced at 16, then asked for 1: a step of 1 item costs 11x an item's share of a step
    # of 16. The pace's cap on long intervals (4x) is for its smoothing, not for this fit.
    clock = FakeClock()
    pace = Pace(clock)
    for batch in [16] * 12 + [1] * 12:
        clock.advance(0.040 + 0.004 * batch)
        pace.stepped(batch)
    assert pace.cost.items == pytest.approx(10.0)


def test_without_batches_far_apart_the_fitted_fixed_part_fades() -> None:
    steps = [(b, 0.040 + 0.004 * b) for b in (16, 11, 9, 7, 5, 4, 3, 2)]
    cost = measured_cost(steps + [(16, 0.104)] * 47)  # the window still holds a 2
    assert cost.items == pytest.approx(10.0)
    for _ in range(70):  # then 16s only
        cost.stepped(16, 0.104)
    assert cost.items == pytest.approx(10.0 * 0.99**70)


def test_steps_whose_time_does_not_grow_with_the_batch_are_all_fixed_cost() -> None:
    # Exactly flat: the fitted cost of an item is 0, give or take nothing.
    cost = measured_cost([(16, 0.25), (8, 0.25), (4, 0.25), (2, 0.25)] * 3)
    assert cost.items == 32, "at most twice the largest batch: it fades back from there"
    assert group({"a": (16, 0.004), "d": (2, 0.075)}, "d").batch_for(16, cost.items) == 16


def test_a_gpu_slower_as_its_batch_shrank_shows_no_fixed_part() -> None:
    # A GPU slowing while its batch follows it down: no GPU's steady steps look like this.
    cost = measured_cost([(16, 0.150), (8, 0.160), (4, 0.170), (2, 0.180)] * 3)
    assert cost.items == 0
    ramp = [(14, 0.063)] * 40 + [(14, 0.070), (13, 0.075), (12, 0.080), (11, 0.085)]
    assert measured_cost([*ramp, (10, 0.09), (9, 0.095)]).items == 0


def test_a_learner_is_not_shrunk_below_the_batch_its_fixed_part_is_worth() -> None:
    # The fastest steps in 64 ms. A learner with 120 ms fixed and 2 ms an item cannot step
    # that fast at any batch: it keeps every item (16, 152 ms), not 2 items in 124 ms.
    latency_bound = {"a": (16, 0.004), "d": (2, 0.124 / 2)}
    assert group(latency_bound, "d").batch_for(16) == 1, "proportional: it would shrink"
    assert group(latency_bound, "d").batch_for(16, 60.0) == 16
    # 24 ms fixed and 4 ms an item: 10 items fit in 64 ms, fewer than the 6 its fixed part
    # is worth would not: the fit wins.
    fits = {"a": (16, 0.004), "d": (16, (0.024 + 0.004 * 16) / 16)}
    assert group(fits, "d").batch_for(16, 6.0) == 10
    # 40 ms fixed, 8 ms an item: 3 items fit, but its fixed part is worth 5: it takes 5.
    bound = {"a": (16, 0.004), "d": (3, (0.040 + 0.008 * 3) / 3)}
    assert group(bound, "d").batch_for(16, 5.0) == 5


def step_times(fixed_s: float, per_item_s: float) -> Callable[[int], float]:
    return lambda batch: fixed_s + per_item_s * batch


def with_stalls(
    times: Callable[[int], float], every: int, stall_s: float
) -> Callable[[int], float]:
    steps = 0

    def took(batch: int) -> float:
        nonlocal steps
        steps += 1
        return times(batch) + (stall_s if steps % every == 0 else 0.0)

    return took


def converged_batches(slow: Callable[[int], float]) -> list[int]:
    """A fast learner (64 ms for 16 items, in proportion) and a slow one stepping on driven
    clocks, each reading the other's pace after every step; the slow one's last batches."""
    fast_clock, slow_clock = FakeClock(), FakeClock()
    fast = Work(16, "fast", 1, clock=fast_clock)
    slower = Work(16, "slow", 1, clock=slow_clock)
    fast.stepped()
    slower.stepped()
    batches = []
    for _ in range(300):
        fast_clock.advance(0.004 * fast.batch)
        fast.stepped()
        while slow_clock() < fast_clock():
            slow_clock.advance(slow(slower.batch))
            slower.stepped()
            batches.append(slower.batch)
        fast.others, slower.others = {"slow": slower.mine()}, {"fast": fast.mine()}
    return batches[-20:]


def test_a_learner_four_times_slower_in_proportion_takes_a_quarter_of_the_batch() -> None:
    assert set(converged_batches(step_times(0.0, 0.016))) == {4}


def test_a_learner_slowed_by_a_fixed_cost_keeps_its_items() -> None:
    # 120 ms fixed: it can never step in the fastest's 64 ms. Sized in proportion, its
    # batch shrank to 2 (124 ms a step: 16 items a second instead of 105).
    assert min(converged_batches(step_times(0.120, 0.002))) >= 12
    # 16 ms fixed, 4 ms an item: 12 items fit in 64 ms, and it steps as often as the fastest.
    assert set(converged_batches(step_times(0.016, 0.004))) == {12}
    # A stall of 150 ms every 8th step does not send it back to a batch of 1.
    assert min(converged_batches(with_stalls(step_times(0.120, 0.002), 8, 0.150))) >= 12
