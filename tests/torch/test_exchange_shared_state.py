"""What a shared model holds besides the parameters, and what every learner must agree on.

Buffers travel with the parameters (floating ones under the outer rule, integer ones as
their largest value); the options that decide how the shared model moves are recorded in
its layout and refused when a learner asks for others; frozen parameters that differ
between learners are warned about; a model compiled or wrapped on one learner and plain on
another is the same model; and a ``bfloat16`` wire stores the shared weights in
bf16, as the docs say.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from gradientmail import ConfigurationError, Mailbox, from_url  # noqa: E402 - after importorskip
from gradientmail.torch import Exchange, load_shared  # noqa: E402
from tests.support.exchange_workers import (  # noqa: E402
    exact_exchange,
    flat,
    initial,
    integer_model,
    shared_now,
)


class Counted(torch.nn.Module):
    """The integer model with a floating buffer (``total``) and an integer one (``count``)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = integer_model()
        self.register_buffer("total", torch.zeros(3))
        self.register_buffer("count", torch.zeros((), dtype=torch.long))
        self.register_buffer("scratch", torch.zeros(2), persistent=False)

    def forward(self, x: Any) -> Any:
        return self.linear(x) + self.total


def bump(model: Counted, total: float, count: int) -> None:
    with torch.no_grad():
        model.total += total
        model.count.fill_(count)
        model.scratch += 1


def test_buffers_travel_with_the_parameters_and_load_shared_fills_them() -> None:
    """Floating buffers move under the same rule as the parameters (exactly, here); an
    integer buffer takes the largest value any learner had; a non-persistent one stays."""
    box = from_url("memory://exchange-buffers")
    a_model, b_model = Counted(), Counted()
    with exact_exchange(a_model, box, "a", every=1), exact_exchange(b_model, box, "b", every=1):
        bump(a_model, 2, 5)
        bump(b_model, 3, 7)
    # b left first (the inner with block), then a, which adopted the final version.
    loaded = Counted()
    load_shared(loaded, box)
    assert torch.equal(loaded.total, torch.full((3,), 5.0))
    assert int(loaded.count) == 7, "the largest count, not the last one applied"
    assert torch.equal(loaded.scratch, torch.zeros(2)), "a non-persistent buffer is not shared"
    assert torch.equal(a_model.total, loaded.total)
    assert int(a_model.count) == 7, "adopting takes the shared count where it is larger"


class Masked(torch.nn.Module):
    """The integer model with a causal attention mask as a buffer: ``-inf`` above the
    diagonal, as ``nn.Transformer.generate_square_subsequent_mask`` makes it."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = integer_model()
        self.register_buffer("mask", torch.nn.Transformer.generate_square_subsequent_mask(4))


def test_an_infinite_buffer_that_never_changes_stays_what_it_was_not_nan() -> None:
    """A mask's ``-inf`` minus itself is NaN: a delta or an adoption made by plain
    subtraction turned every learner's mask, and the shared one, into NaN."""
    box = from_url("memory://exchange-mask")
    a_model, b_model = Masked(), Masked()
    mask = a_model.mask.clone()
    with (
        exact_exchange(a_model, box, "a", every=1) as a,
        exact_exchange(b_model, box, "b", every=1),
    ):
        for _ in range(3):
            with torch.no_grad():
                a_model.get_parameter("linear.weight").sub_(1)
            a.step()
    loaded = Masked()
    load_shared(loaded, box)
    for model in (loaded, a_model, b_model):
        assert torch.equal(model.mask, mask), "the mask changed"
    assert torch.equal(loaded.linear.weight, a_model.linear.weight)


def test_batch_norm_statistics_are_shared_so_the_loaded_model_evaluates_as_the_learners() -> None:
    box = from_url("memory://exchange-batch-norm")
    torch.manual_seed(0)
    models = [torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.BatchNorm1d(3)) for _ in "ab"]
    models[1].load_state_dict(models[0].state_dict())
    data = [torch.randn(64, 3) + 4, torch.randn(64, 3) - 2]
    with (
        Exchange(models[0], mailbox=box, learner_id="a"),
        Exchange(models[1], mailbox=box, learner_id="b"),
    ):
        for model, batch in zip(models, data, strict=True):
            for _ in range(5):
                model(batch)  # train mode: the running statistics move
    loaded = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.BatchNorm1d(3))
    load_shared(loaded, box)
    bn = loaded[1]
    assert not torch.equal(bn.running_mean, torch.zeros(3)), "the statistics reached the store"
    last = models[0]  # the outer with block: the last to leave, it adopted the final version
    assert torch.equal(bn.running_mean, last[1].running_mean)
    assert int(bn.num_batches_tracked) == 5
    probe = torch.randn(8, 3)
    assert torch.equal(loaded.eval()(probe), last.eval()(probe))


def test_buffers_false_keeps_each_learners_buffers_its_own() -> None:
    box = from_url("memory://exchange-local-buffers")
    a_model, b_model = Counted(), Counted()
    with (
        Exchange(a_model, mailbox=box, learner_id="a", every=1, buffers=False),
        Exchange(b_model, mailbox=box, learner_id="b", every=1, buffers=False),
    ):
        bump(a_model, 2, 7)
        bump(b_model, 3, 5)
    assert torch.equal(a_model.total, torch.full((3,), 2.0))
    assert torch.equal(b_model.total, torch.full((3,), 3.0))
    loaded = Counted()
    load_shared(loaded, box)
    assert torch.equal(loaded.total, torch.zeros(3)), "load_shared leaves local buffers alone"


# -- settings every learner must share ---------------------------------------------------------


@pytest.mark.parametrize(
    ("option", "first", "other"),
    [
        ("outer_lr", 0.5, 0.25),
        ("outer_lr", None, 0.5),
        ("staleness", 1.0, 0.5),
        ("staleness", 1.0, None),
        ("max_staleness", 64, 8),
        ("active_window", 600.0, 30.0),
        ("buffers", True, False),
    ],
)
def test_a_learner_asking_for_another_shared_setting_is_refused_naming_both_values(
    option: str, first: Any, other: Any
) -> None:
    box = from_url(f"memory://exchange-setting-{option}-{other}")
    with Exchange(Counted(), mailbox=box, learner_id="a", **{option: first}):
        pass
    late = Exchange(Counted(), mailbox=box, learner_id="b", **{option: other})
    with pytest.raises(ConfigurationError) as refused:
        late.__enter__()
    message = str(refused.value)
    assert f"{option}={first!r}" in message, message
    assert repr(other) in message, message


def test_the_momentum_of_a_rule_object_is_a_shared_setting_too() -> None:
    from gradientmail.torch import DelayedNesterov

    box = from_url("memory://exchange-setting-momentum")
    with Exchange(integer_model(), mailbox=box, learner_id="a", outer=DelayedNesterov()):
        pass
    late = Exchange(
        integer_model(), mailbox=box, learner_id="b", outer=DelayedNesterov(momentum=0.5)
    )
    with pytest.raises(ConfigurationError, match="momentum"):
        late.__enter__()


def test_every_and_keep_may_differ_between_learners() -> None:
    box = from_url("memory://exchange-setting-own")
    with (
        Exchange(integer_model(), mailbox=box, learner_id="a", every=1, keep=2),
        Exchange(integer_model(), mailbox=box, learner_id="b", every=7, keep=5),
    ):
        pass


def started(box: Mailbox, model: Any = None) -> None:
    """Start the shared model in ``box`` from learner ``a`` with ``model`` (the integer
    model by default), which then leaves: the layout a later learner is checked against."""
    with Exchange(integer_model() if model is None else model, mailbox=box, learner_id="a"):
        pass


# -- frozen parameters and bf16 ----------------------------------------------------------------


def test_a_parameter_frozen_here_but_trained_by_the_first_learner_is_warned_about() -> None:
    box = from_url("memory://exchange-frozen")
    started(box)
    frozen = integer_model()
    frozen.bias.requires_grad_(False)
    with (
        pytest.warns(RuntimeWarning, match=r"'bias'.*frozen here"),
        Exchange(frozen, mailbox=box, learner_id="b"),
    ):
        pass


def test_the_same_frozen_parameters_everywhere_are_not_warned_about() -> None:
    box = from_url("memory://exchange-frozen-alike")

    def frozen() -> Any:
        model = integer_model()
        model.bias.requires_grad_(False)
        return model

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with (
            Exchange(frozen(), mailbox=box, learner_id="a"),
            Exchange(frozen(), mailbox=box, learner_id="b"),
        ):
            pass


def shared_bits(box: Mailbox) -> Any:
    model = torch.nn.Linear(64, 64)
    load_shared(model, box)
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def test_a_bf16_wire_stores_the_shared_weights_in_bf16_and_never_moves_a_frozen_one_again() -> None:
    """As the docs say: with ``wire="bfloat16"`` the weights themselves are rounded to bf16
    once, when published; a parameter nobody trains then stays exactly where it is."""
    box = from_url("memory://exchange-bf16")
    model = torch.nn.Linear(64, 64)
    model.bias.requires_grad_(False)
    with Exchange(model, mailbox=box, learner_id="a", every=1, wire="bfloat16") as exchange:
        published = shared_bits(box)
        assert torch.equal(published, published.to(torch.bfloat16).float()), "bf16 values"
        for _ in range(20):
            with torch.no_grad():
                model.weight += 0.01
            exchange.step()
    final = shared_bits(box)
    assert torch.equal(final[-64:], published[-64:]), "the frozen bias never moved again"
    assert not torch.equal(final[:-64], published[:-64]), "the weight trained"


# -- wrapped models ----------------------------------------------------------------------------


def frozen_bias(model: Any) -> Any:
    model.bias.requires_grad_(False)
    return model


def test_a_compiled_a_wrapped_and_a_plain_learner_train_one_model() -> None:
    """``torch.compile`` names every parameter ``_orig_mod.*``, ``DataParallel`` and
    ``DistributedDataParallel`` ``module.*``: the parameters are the same, so a fleet where
    some GPUs compile (or wrap) and others cannot is one model, frozen parameters alike."""
    box = from_url("memory://exchange-wrapped")
    plain = frozen_bias(integer_model())
    compiled = torch.compile(frozen_bias(integer_model()), backend="eager")
    wrapped = torch.nn.DataParallel(frozen_bias(integer_model()))  # no GPU: wraps only
    assert [n for n, _ in compiled.named_parameters()] == ["_orig_mod.weight", "_orig_mod.bias"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # frozen alike: no warning either
        with (
            exact_exchange(plain, box, "plain", every=1) as a,
            exact_exchange(compiled, box, "compiled", every=1) as b,
            exact_exchange(wrapped, box, "wrapped", every=1) as c,
        ):
            for model, exchange, size in ((compiled, b, 1), (wrapped, c, 2), (plain, a, 4)):
                with torch.no_grad():
                    model.get_parameter(
                        next(n for n, _ in model.named_parameters() if n.endswith("weight"))
                    ).sub_(size)
                exchange.step()
    moved = initial().clone()
    moved[: 3 * 4] -= 7  # the weight, by each learner's change once; the bias stays
    assert torch.equal(shared_now(box), moved)
    evaluated = torch.compile(integer_model(), backend="eager")
    load_shared(evaluated, box)
    assert torch.equal(flat(evaluated), moved)


def test_a_wrapped_model_unlike_the_shared_one_is_still_refused_by_its_plain_name() -> None:
    box = from_url("memory://exchange-wrapped-unlike")
    started(box)
    other = torch.compile(torch.nn.Linear(4, 2), backend="eager")
    with (
        pytest.raises(ConfigurationError, match=r"parameter 0: this model has weight \(2, 4\)"),
        Exchange(other, mailbox=box, learner_id="b"),
    ):
        pass


def test_a_model_in_another_dtype_is_refused_naming_the_cast() -> None:
    box = from_url("memory://exchange-dtype")
    started(box)
    half = integer_model().to(torch.bfloat16)
    with (
        pytest.raises(ConfigurationError, match=r"bfloat16.*model\.to\(torch\.float32\)"),
        Exchange(half, mailbox=box, learner_id="b"),
    ):
        pass


def test_an_integer_buffer_in_another_dtype_is_refused_without_a_cast_that_cannot_work() -> None:
    """``Module.to`` casts floating tensors only: ``model.to(torch.int64)`` would raise."""
    box = from_url("memory://exchange-dtype-count")

    def counted(dtype: Any) -> Any:
        model = integer_model()
        model.register_buffer("seen", torch.zeros((), dtype=dtype))
        return model

    started(box, counted(torch.long))
    with (
        pytest.raises(
            ConfigurationError, match=r"buffer 0: this model has seen \(\) int32"
        ) as refused,
        Exchange(counted(torch.int32), mailbox=box, learner_id="b"),
    ):
        pass
    assert "model.to(" not in str(refused.value)
