"""A loop that does not take the batch ``exchange.batch_size`` asks for is warned about.

The commonest slip with the recipe for unequal GPUs is to pass ``batch_size=`` and keep a
fixed batch (a DataLoader's): the slow learners then train on the fast one's batch while
their deltas are weighted as if they covered their own, silently. Learners run on driven
clocks (paces 1, 2, 4 and 4: batches 4, 2, 1 and 1), so every batch asked is exact.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from functools import partial

import pytest

torch = pytest.importorskip("torch")

from gradientmail import from_url  # noqa: E402
from gradientmail._exchange.batch_check import PATIENCE, RECENT, BatchCheck, fits  # noqa: E402
from gradientmail.torch import Exchange  # noqa: E402
from tests.support.exchange_workers import SHAPE, integer_model  # noqa: E402
from tests.support.paced import (  # noqa: E402
    BATCHES,
    PACES,
    WIDTH,
    Paced,
    applied,
    learners,
    settle_paces,
)
from tests.support.polling import wait_until  # noqa: E402


@contextmanager
def caught() -> Iterator[list[str]]:
    """The RuntimeWarnings raised inside, every one of them, as their messages."""
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        messages: list[str] = []
        yield messages
    messages.extend(str(w.message) for w in got if w.category is RuntimeWarning)


def settled(stack: ExitStack, url: str) -> dict[str, Paced]:
    """The four learners, every pace known, and every recent batch asked the settled one
    (the slow learners were asked 4 before they knew the others' paces)."""
    group = learners(from_url(url), stack)
    settle_paces(group)
    for _ in range(RECENT):
        for learner in group:
            learner.step(took=learner.exchange.batch_size)
    return {learner.name: learner for learner in group}


def test_a_slow_learner_that_keeps_the_fast_batch_is_warned_once() -> None:
    with ExitStack() as stack:
        slow = settled(stack, "memory://batch-check-slip")["c"]
        with caught() as messages:
            for _ in range(PATIENCE - 1):
                slow.step(took=4)  # the fast learner's batch, not the 1 asked
        assert messages == [], "a few steps are not yet a habit"
        with caught() as messages:
            slow.step(took=4)
        assert len(messages) == 1, messages
        assert "learner 'c'" in messages[0]
        assert "the last took 4, asked 1" in messages[0]
        assert "take exactly exchange.batch_size items each step" in messages[0]
        assert "batch_sampler=ExchangeBatchSampler(exchange, sampler)" in messages[0]
        with caught() as messages:
            for _ in range(PATIENCE + 1):
                slow.step(took=4)
        assert messages == [], "once"


def test_a_fixed_batch_is_caught_from_the_first_steps() -> None:
    """From the start: the slow learner is asked 4 until it knows the others' paces, then 1,
    and a loop that kept 4 is warned about once the 4 is no longer recent."""
    with ExitStack() as stack:
        group = learners(from_url("memory://batch-check-start"), stack)
        with caught() as messages:
            for _ in range(RECENT + PATIENCE + 4):
                for learner in group:
                    learner.step(took=4)
    assert sorted(m.split(":")[0] for m in messages) == [f"learner {n!r}" for n in "bcd"]


def test_steps_that_take_the_batch_asked_are_never_warned_even_as_it_changes() -> None:
    """From the first step, while every learner's batch is resized as the paces become
    known, with no batch but this step's allowed: each step is judged against the batch
    asked before it, not the next one."""
    with ExitStack() as stack:
        box = from_url("memory://batch-check-right")
        group = [Paced(box, name, pace) for name, pace in PACES.items()]
        for learner in group:  # before entering, which attaches it to the model
            assert learner.exchange._check is not None
            learner.exchange._check = BatchCheck(learner.name, patience=1, recent=1)
            stack.enter_context(learner.exchange)
        with caught() as messages:
            for _ in range(6):
                for learner in group:
                    learner.step(took=learner.exchange.batch_size)
        assert {x.name: x.exchange.batch_size for x in group} == BATCHES
    assert messages == []


def test_a_loader_that_reads_the_batch_ahead_is_not_warned() -> None:
    """A sampler feeding prefetching workers reads ``exchange.batch_size`` a few steps
    ahead: through the resize it takes the batch asked that many steps before."""
    lag = PATIENCE + 2
    with ExitStack() as stack:
        group = learners(from_url("memory://batch-check-lag"), stack)
        read = {learner.name: [learner.exchange.batch_size] * lag for learner in group}
        with caught() as messages:
            for _ in range(RECENT + lag):
                for learner in group:
                    learner.step(took=read[learner.name].pop(0))
                    read[learner.name].append(learner.exchange.batch_size)
    assert messages == []


def test_a_short_step_now_and_then_is_not_a_habit() -> None:
    """The last batch of a dataset is short: a step that fits starts the count again, and
    a step with no forward of the model seen is not judged either way."""
    with ExitStack() as stack:
        learner = settled(stack, "memory://batch-check-short")["b"]  # asked 2
        with caught() as messages:
            for _ in range(2):
                for _ in range(PATIENCE - 1):
                    learner.step(took=3)
                learner.step(took=2)
        assert messages == []
        with caught() as messages:
            for _ in range(PATIENCE - 1):
                learner.step(took=3)
            learner.step()  # its forwards elsewhere: nothing to judge
            learner.step(took=3)
        assert len(messages) == 1, "the unjudged step did not start the count again"


def test_a_warning_made_an_error_comes_after_the_step_is_counted_whole() -> None:
    with ExitStack() as stack:
        slow = settled(stack, "memory://batch-check-error")["c"]
        for _ in range(PATIENCE - 1):
            slow.step(took=4)
        done = slow.exchange.stats.exchanges
        slow.model(torch.zeros(4, WIDTH, SHAPE[1]))
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with pytest.raises(RuntimeWarning, match="the last took 4, asked 1"):
                slow.exchange.step()
        wait_until(partial(applied, slow.exchange, done), 60, "the step's exchange")
        slow.step(took=1)  # and training goes on


def test_without_batch_size_the_loop_sizes_its_own_batches() -> None:
    model = integer_model()
    with (
        caught() as messages,
        Exchange(model, mailbox=from_url("memory://batch-check-none"), learner_id="x") as ex,
    ):
        for _ in range(2 * PATIENCE):
            model(torch.zeros(7, SHAPE[1]))
            ex.step()
    assert messages == []


def test_a_torchscript_model_trains_unjudged() -> None:
    """A scripted module takes no hooks: the Exchange enters all the same."""
    model = torch.jit.script(integer_model())
    box = from_url("memory://batch-check-script")
    with caught() as messages, Exchange(model, mailbox=box, learner_id="x", batch_size=4) as ex:
        for _ in range(2 * PATIENCE):
            model(torch.zeros(9, SHAPE[1]))
            ex.step()
    assert messages == []


def judged(module: torch.nn.Module, steps: list[list[dict[str, object]]], asked: int) -> bool:
    """Whether ``steps`` of forwards (each the keyword arguments of one call, ``args`` the
    positional ones) draw the warning, with a patience of 1."""
    check = BatchCheck("x", patience=1)
    handle = check.attach(module)
    assert handle is not None
    try:
        said: list[str | None] = []
        for forwards in steps:
            for call in forwards:
                kwargs = dict(call)
                args = kwargs.pop("args", ())
                module(*args, **kwargs)  # type: ignore[arg-type]
            said.append(check.stepped(asked))
    finally:
        handle.remove()
    return any(said)


class Keyed(torch.nn.Module):
    """A model called with a scalar first and its batch by keyword (``ids=``)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(SHAPE[1], 1)

    def forward(self, scale: torch.Tensor, *, ids: torch.Tensor) -> torch.Tensor:
        return self.linear(ids.float().unsqueeze(-1).expand(*ids.shape, SHAPE[1])) * scale


def rows(n: int, *more: int) -> dict[str, object]:
    return {"args": (torch.zeros(n, *more, SHAPE[1]),)}


def test_the_batch_is_read_where_models_carry_it() -> None:
    linear = torch.nn.Linear(SHAPE[1], 1)
    assert not judged(linear, [[rows(8)]], 8), "one forward of the batch"
    assert judged(linear, [[rows(16)]], 8), "a batch of its own"
    assert not judged(linear, [[rows(3), rows(3)]], 6), "gradient accumulation"
    assert not judged(linear, [[rows(6), rows(6)]], 6), "two views of one batch"
    assert judged(linear, [[rows(6), rows(3)]], 6), "neither a sum nor whole views"
    assert not judged(linear, [[rows(5, 8)]], 8), "sequence first: the batch is dimension 1"
    assert judged(linear, [[rows(5, 7)]], 8)
    keyed = Keyed()
    ids = torch.zeros(8, 5, dtype=torch.long)
    assert not judged(keyed, [[{"args": (torch.tensor(2.0),), "ids": ids}]], 8)
    assert judged(keyed, [[{"args": (torch.tensor(2.0),), "ids": ids}]], 6)


class Passing(torch.nn.Module):
    """A model whose input needs no plain sizes: it hands it back."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


@pytest.mark.parametrize("layout", [torch.strided, torch.jagged])
@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors is in prototype")
def test_a_nested_tensor_is_skipped_not_raised_into_the_loop(layout: torch.layout) -> None:
    parts = [torch.zeros(2, SHAPE[1]), torch.zeros(3, SHAPE[1])]
    nested = torch.nested.nested_tensor(parts, layout=layout)
    assert not judged(Passing(), [[{"args": (nested,)}]] * 3, 8)


def test_evaluation_forwards_are_not_counted() -> None:
    linear = torch.nn.Linear(SHAPE[1], 1)
    check = BatchCheck("x", patience=1)
    handle = check.attach(linear)
    assert handle is not None
    with torch.no_grad():
        linear(torch.zeros(100, SHAPE[1]))
    linear.eval()
    linear(torch.zeros(100, SHAPE[1]))
    linear.train()
    linear(torch.zeros(6, SHAPE[1]))
    assert check.stepped(6) is None
    handle.remove()


def test_the_filter_the_docs_give_silences_the_warning() -> None:
    with ExitStack() as stack:
        slow = settled(stack, "memory://batch-check-filter")["c"]
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            warnings.filterwarnings("ignore", "learner .* did not take the items")
            for _ in range(PATIENCE):
                slow.step(took=4)
    assert slow.exchange._check is not None
    assert slow.exchange._check.warned, "it was due"
    assert got == []


@pytest.mark.parametrize(
    ("forwards", "asked", "fit"),
    [
        ([(8, None)], {8}, True),  # a batch of token ids, one dimension
        ([(8, None)], {4}, False),
        ([(8, None)], {4, 8}, True),  # asked 8 a few steps before
        ([(3, 8), (3, 8)], {8}, True),  # sequence first, two views
        ([(2, 8), (6, 8)], {8}, True),  # accumulation along dimension 0
        ([(2, 8), (6, None)], {8}, True),
        ([(2, 5), (6, None)], {5}, False),  # dimension 1 is missing from one forward
        ([(4, None), (8, None)], {4, 8}, False),  # two sizes, neither their sum
    ],
)
def test_fits(forwards: list[tuple[int, int | None]], asked: set[int], fit: bool) -> None:
    assert fits(forwards, asked) is fit
