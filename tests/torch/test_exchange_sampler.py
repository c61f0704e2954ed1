"""``ExchangeBatchSampler``: a DataLoader's batches of the size the Exchange asks for.

A map-style dataset's DataLoader then feeds the recipe for unequal GPUs as it is: each batch
has the size asked when it was filled, every index is in exactly one batch, and the
Exchange's check of the batches taken stays silent.
"""

from __future__ import annotations

import warnings
from contextlib import ExitStack
from dataclasses import dataclass, field

import pytest

torch = pytest.importorskip("torch")

from torch.utils.data import (  # noqa: E402
    DataLoader,
    RandomSampler,
    SequentialSampler,
    TensorDataset,
)

from gradientmail import ConfigurationError, from_url  # noqa: E402
from gradientmail._exchange.batch_check import RECENT  # noqa: E402
from gradientmail.torch import Exchange, ExchangeBatchSampler  # noqa: E402
from tests.support.exchange_workers import SHAPE, integer_model  # noqa: E402
from tests.support.paced import BATCHES, WIDTH, learners, settle_paces  # noqa: E402


@dataclass
class Asking:
    """An Exchange handing out batch sizes from a list, one per batch, the last repeated."""

    sizes: list[int]
    reads: list[int] = field(default_factory=list)

    def _hand_out_batch(self) -> int:
        size = self.sizes[min(len(self.reads), len(self.sizes) - 1)]
        self.reads.append(size)
        return size


def test_each_batch_takes_the_size_asked_as_it_is_filled_and_every_index_once() -> None:
    asking = Asking([4, 2, 3, 1, 5])
    batches = list(ExchangeBatchSampler(asking, range(20)))
    assert [len(b) for b in batches] == [4, 2, 3, 1, 5, 5]
    assert [i for b in batches for i in b] == list(range(20))


def test_the_last_smaller_batch_is_kept_unless_drop_last() -> None:
    assert list(ExchangeBatchSampler(Asking([4]), range(10))) == [
        [0, 1, 2, 3],
        [4, 5, 6, 7],
        [8, 9],
    ]
    assert list(ExchangeBatchSampler(Asking([4]), range(10), drop_last=True)) == [
        [0, 1, 2, 3],
        [4, 5, 6, 7],
    ]
    assert list(ExchangeBatchSampler(Asking([5]), range(10), drop_last=True)) == [
        [0, 1, 2, 3, 4],
        [5, 6, 7, 8, 9],
    ], "a full last batch stays"


def test_each_iteration_is_a_new_epoch_of_the_sampler() -> None:
    sampler = ExchangeBatchSampler(Asking([3]), range(6))
    assert list(sampler) == list(sampler) == [[0, 1, 2], [3, 4, 5]]


def test_a_dataloader_with_workers_collates_the_sizes_asked_in_order() -> None:
    dataset = TensorDataset(torch.arange(31))
    asking = Asking([4, 1, 2, 6, 3])  # 16 items, then five batches of 3
    loader = DataLoader(
        dataset, batch_sampler=ExchangeBatchSampler(asking, range(31)), num_workers=2
    )
    batches = [batch.tolist() for (batch,) in loader]
    assert [len(b) for b in batches] == [4, 1, 2, 6, 3, 3, 3, 3, 3, 3]
    assert [i for b in batches for i in b] == list(range(31))


def test_it_has_no_length_and_says_why() -> None:
    dataset = TensorDataset(torch.arange(8))
    loader = DataLoader(dataset, batch_sampler=ExchangeBatchSampler(Asking([2]), range(8)))
    with pytest.raises(TypeError, match=r"no length: its batches follow exchange\.batch_size"):
        len(loader)


def test_learners_of_unequal_speed_fed_by_dataloaders_take_their_batches_unwarned() -> None:
    """Paces 1, 2, 4 and 4 with ``batch_size=4``: batches of 4, 2, 1 and 1 items, each
    carried through the model's forward, and the batch check never fires."""
    items = TensorDataset(torch.zeros(400, WIDTH, SHAPE[1]))
    with ExitStack() as stack, warnings.catch_warnings():
        warnings.simplefilter("error")
        group = learners(from_url("memory://exchange-sampler"), stack)
        settle_paces(group)
        loaders = {
            x.name: iter(
                DataLoader(
                    items, batch_sampler=ExchangeBatchSampler(x.exchange, SequentialSampler(items))
                )
            )
            for x in group
        }
        for _ in range(12):
            for learner in group:
                (batch,) = next(loaders[learner.name])
                assert len(batch) == BATCHES[learner.name]
                learner.model(batch)  # the forward the Exchange's check reads
                learner.step()


def test_an_exchange_without_batch_size_is_refused_at_the_first_batch() -> None:
    exchange = Exchange(integer_model(), mailbox=from_url("memory://sampler-no"), learner_id="a")
    with pytest.raises(ConfigurationError, match="batch_size"):
        next(iter(ExchangeBatchSampler(exchange, range(4))))


def test_batches_made_further_ahead_than_the_checks_window_are_not_warned_about() -> None:
    """A DataLoader with many workers holds ``num_workers x prefetch_factor`` batches
    ahead: here 40, made while the slow learner ``c`` was still asked for 4 (before the
    paces were known), and taken after it has been asked for 1 for longer than the batch
    check remembers what it asked. They are what the sampler made: no warning."""
    items = TensorDataset(torch.zeros(400, WIDTH, SHAPE[1]))
    with ExitStack() as stack, warnings.catch_warnings():
        warnings.simplefilter("error")
        group = learners(from_url("memory://exchange-sampler-ahead"), stack)
        slow = group[2]
        sampler = ExchangeBatchSampler(slow.exchange, SequentialSampler(items))
        ahead = [
            batch
            for batch, _ in zip(DataLoader(items, batch_sampler=sampler), range(40), strict=False)
        ]
        assert {len(batch) for (batch,) in ahead} == {4}
        settle_paces(group)
        for _ in range(RECENT + 4):
            for learner in group:
                learner.step(took=learner.exchange.batch_size)
        assert slow.exchange.batch_size == 1
        for (batch,) in ahead[:8]:
            slow.model(batch)
            slow.step()


def test_arguments_in_the_wrong_order_are_refused_by_name() -> None:
    exchange = Exchange(integer_model(), mailbox=from_url("memory://sampler-order"), batch_size=4)
    dataset = TensorDataset(torch.arange(8))
    with pytest.raises(ConfigurationError, match="must be the Exchange, not RandomSampler"):
        ExchangeBatchSampler(RandomSampler(dataset), exchange)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"an iterable of indices .* not int"):
        ExchangeBatchSampler(exchange, 8)  # type: ignore[arg-type]
