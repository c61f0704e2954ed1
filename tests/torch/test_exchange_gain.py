"""The noise gain: gradients measured at each learner's batch, the noise fitted from them, and
deltas on small batches raised to what one step on the group's batch carries."""

from __future__ import annotations

import math
from contextlib import ExitStack
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from gradientmail import ConfigurationError, from_url  # noqa: E402
from gradientmail._exchange.gradients import SMOOTHING, GradientMeter, wants_gain  # noqa: E402
from gradientmail._exchange.noise import noise_fit, noise_gain, noise_scale  # noqa: E402
from gradientmail._exchange.pace import GroupPace, LearnerPace  # noqa: E402
from gradientmail.torch import Exchange  # noqa: E402
from tests.support.exchange_workers import initial, shared_now  # noqa: E402
from tests.torch.test_exchange_recipe import BATCHES, SHARES, learners, settle_paces  # noqa: E402

SIGNAL, NOISE = 2.0, 48.0  # |G|^2 and the per-item noise S: the noise scale S / |G|^2 is 24


def square_at(batch: float) -> float:
    """The mean square of a gradient on ``batch`` items: ``|G|^2 + S / batch``."""
    return SIGNAL + NOISE / batch


def test_the_fit_recovers_the_signal_and_the_noise_from_two_batch_sizes_or_more() -> None:
    fit = noise_fit((b, square_at(b)) for b in (16, 8, 8, 4))
    assert fit == pytest.approx((SIGNAL, NOISE))
    assert noise_fit([(16, square_at(16)), (4, square_at(4))]) == pytest.approx((SIGNAL, NOISE))


def test_the_fit_knows_nothing_from_one_batch_size_or_from_unmeasured_learners() -> None:
    assert noise_fit([]) is None
    assert noise_fit([(8, 5.0), (8, 7.0)]) is None, "equal batches cannot tell signal from noise"
    unmeasured = [(16, 0.0), (4, math.inf), (4, math.nan), (0, 3.0)]
    assert noise_fit([(8, 5.0), *unmeasured]) is None


@pytest.mark.parametrize("batch", [4, 8, 16])
def test_the_gain_is_the_root_of_the_mean_squares_at_the_own_and_the_group_batch(
    batch: int,
) -> None:
    gain = noise_gain((SIGNAL, NOISE), batch, 36)
    assert gain == pytest.approx(math.sqrt(square_at(batch) / square_at(36)))
    assert 1 < gain < math.sqrt(36 / batch)


def test_all_noise_gives_the_root_of_the_batch_ratio_and_all_signal_gives_one() -> None:
    assert noise_gain((0.0, NOISE), 4, 36) == pytest.approx(3.0)
    assert noise_gain((-1.0, NOISE), 4, 36) == pytest.approx(3.0), "a fit below zero is noise"
    assert noise_gain((SIGNAL, 0.0), 4, 36) == 1.0
    assert noise_gain((SIGNAL, -5.0), 4, 36) == 1.0, "a square growing with the batch: no gain"


def test_no_fit_or_a_batch_as_large_as_the_groups_keeps_the_share_as_it_is() -> None:
    assert noise_gain(None, 4, 36) == 1.0
    assert noise_gain((SIGNAL, NOISE), 36, 36) == 1.0
    assert noise_gain((SIGNAL, NOISE), 40, 36) == 1.0
    assert noise_gain((SIGNAL, NOISE), 0, 36) == 1.0


def test_a_learner_gains_only_when_it_measures_and_the_group_has_two_batch_sizes() -> None:
    paces = {
        "a": LearnerPace(16, 0.001, 1, square_at(16)),
        "b": LearnerPace(8, 0.002, 1, square_at(8)),
        "c": LearnerPace(8, 0.002, 1, 0.0),  # a learner that does not measure: left out
        "d": LearnerPace(4, 0.004, 1, square_at(4)),
    }
    group = GroupPace(paces, "d", paces["d"])
    assert group.group_batch() == 36
    assert group.noise() == pytest.approx((SIGNAL, NOISE))
    assert noise_gain(group.noise(), 4, 36) == pytest.approx(
        math.sqrt(square_at(4) / square_at(36))
    )
    assert noise_scale(group.noise()) == pytest.approx(NOISE / SIGNAL)
    assert GroupPace(paces, "c", paces["c"]).noise() is None, "c measures nothing: no gain"
    equal = {k: LearnerPace(8, 0.002, 1, 5.0) for k in "ab"}
    assert GroupPace(equal, "a", equal["a"]).noise() is None


def test_the_noise_scale_is_noise_over_signal() -> None:
    assert noise_scale(None) is None
    assert noise_scale((SIGNAL, NOISE)) == 24.0
    assert noise_scale((0.0, NOISE)) == math.inf
    assert noise_scale((SIGNAL, -1.0)) == 0.0


def linear(weights: int = 3) -> torch.nn.Linear:
    model = torch.nn.Linear(weights, 1, bias=False)
    with torch.no_grad():
        model.weight.zero_()
    return model


def test_the_meter_smooths_the_gradients_mean_square_before_each_optimizer_step() -> None:
    model = linear()
    optimizer = torch.optim.AdamW(model.parameters())
    meter = GradientMeter(model.parameters())
    handle = meter.attach(optimizer)
    assert meter.latest() is None
    for scale, expected in ((1.0, 14.0), (2.0, 14.0 + SMOOTHING * (56.0 - 14.0))):
        optimizer.zero_grad()
        model.weight.grad = scale * torch.tensor([[1.0, 2.0, 3.0]])  # |g|^2 = 14 scale^2
        optimizer.step()
        latest = meter.latest()
        assert latest is not None
        assert float(latest) == pytest.approx(expected)
    handle.remove()
    optimizer.step()
    assert float(meter.latest() or 0) == pytest.approx(expected), "measured after removal"


def test_the_meter_skips_frozen_and_sparse_parameters_and_steps_with_no_gradient() -> None:
    embedding = torch.nn.Embedding(4, 2, sparse=True)
    frozen = torch.nn.Parameter(torch.ones(2), requires_grad=False)
    dense = torch.nn.Parameter(torch.zeros(2))
    meter = GradientMeter([*embedding.parameters(), frozen, dense])
    meter.measure()
    assert meter.latest() is None, "no gradient yet: nothing measured"
    embedding(torch.tensor([1])).sum().backward()
    dense.grad = torch.tensor([3.0, 4.0])
    meter.measure()
    assert float(meter.latest() or 0) == pytest.approx(25.0)


def test_the_meter_and_the_fit_find_the_noise_of_real_gradients() -> None:
    """Least squares on ``y = x . w + noise`` at ``w = 0``: the per-item gradient is
    ``-2 x y``; measured at batches of 4 and 16, the fit finds its mean and its noise."""
    generator = torch.Generator().manual_seed(7)
    true_w = torch.tensor([1.0, -2.0, 0.5])

    def smoothed_square(batch: int, steps: int = 4000) -> float:
        """The meter's reading, averaged over the steps after its first hundred."""
        model = linear()
        meter = GradientMeter(model.parameters())
        readings = []
        for _ in range(steps):
            x = torch.randn(batch, 3, generator=generator)
            y = x @ true_w + 2.0 * torch.randn(batch, generator=generator)
            model.zero_grad()
            ((model(x).squeeze(1) - y) ** 2).mean().backward()
            meter.measure()
            readings.append(float(meter.latest() or 0))
        return sum(readings[100:]) / len(readings[100:])

    # Per item, g = -2 x y with y = x . w + 2 e: E g = -2 w, so |G|^2 = 4 |w|^2 = 21; and
    # E |g|^2 = 4 E[|x|^2 y^2] = 4 (3 + 2) |w|^2 + 4 * 3 * 4 = 153 (Gaussian moments): S = 132.
    fit = noise_fit([(16, smoothed_square(16)), (4, smoothed_square(4))])
    assert fit is not None
    signal, noise = fit
    assert signal == pytest.approx(21.0, rel=0.15)
    assert noise == pytest.approx(132.0, rel=0.1)


def test_the_gain_is_off_unless_asked_for() -> None:
    model = linear()
    adam = torch.optim.AdamW(model.parameters())
    assert wants_gain(True, adam)
    assert not wants_gain(False, adam)
    with Exchange(model, mailbox=from_url("memory://gain-default"), optimizer=adam) as exchange:
        assert exchange._work.meter is None, "no gradients are measured without gain=True"


@pytest.mark.parametrize("bad", ["yes", 1, 0.5, None])
def test_a_gain_that_is_not_a_boolean_is_refused(bad: Any) -> None:
    with pytest.raises(ConfigurationError, match=r"gain must be True .* or False"):
        Exchange(linear(), mailbox=from_url("memory://gain-bad"), gain=bad)


def test_gain_true_without_an_optimizer_names_what_to_pass() -> None:
    with pytest.raises(ConfigurationError, match="pass optimizer="):
        Exchange(linear(), mailbox=from_url("memory://gain-alone"), gain=True)


class FixedMeter:
    """A meter that always reports the mean square of a gradient on ``batch`` items."""

    def __init__(self, batch: int) -> None:
        self.square = torch.tensor(square_at(batch))

    def latest(self) -> torch.Tensor:
        return self.square


def test_deltas_raised_by_the_gain_are_each_applied_exactly_once() -> None:
    """Paces 1/2/4/4 (batches 4/2/1/1 of a group of 8), gradients with noise scale 24: each
    delta moves the shared model by its share times its gain, once."""
    box = from_url("memory://gain-exactly-once")
    with ExitStack() as stack:
        group = learners(box, stack)
        for learner in group:
            learner.exchange._work.meter = FixedMeter(BATCHES[learner.name])  # type: ignore[assignment]
        settle_paces(group)
        for round_ in range(3):
            for i, learner in enumerate(group):
                learner.step(size=8 * (i + 1 + round_))
        head = group[0].exchange._handoff.applier.reader.current()
        assert head is not None
        published = {name: entry.pace.grad_square for name, entry in head[0].learners.items()}
        last = {x.name: (x.exchange.stats.noise.gain, x.exchange.stats.noise.scale) for x in group}
    gains = {name: noise_gain((SIGNAL, NOISE), b, 8) for name, b in BATCHES.items()}
    assert gains["a"] > 1
    assert gains["c"] == gains["d"] > gains["b"] > gains["a"]
    expected = initial() + sum(SHARES[x.name] * gains[x.name] * x.total for x in group)
    assert torch.allclose(shared_now(box), expected, rtol=1e-6, atol=1e-4)
    assert published == {name: pytest.approx(square_at(b)) for name, b in BATCHES.items()}
    for name in BATCHES:
        gain, scale = last[name]
        assert gain == pytest.approx(gains[name]), name
        assert scale == pytest.approx(24.0), name


def test_the_ledger_keeps_the_mean_square_and_reads_entries_written_before_it() -> None:
    from gradientmail._exchange.layout import LearnerEntry

    entry = LearnerEntry(seq=3, pace=LearnerPace(8, 0.002, 1, square_at(8)))
    assert LearnerEntry.from_record(entry.to_record()).pace == entry.pace
    older = {k: v for k, v in entry.to_record().items() if k != "gsq"}
    assert LearnerEntry.from_record(older).pace == LearnerPace(8, 0.002, 1, 0.0)
