"""Batches of the size an :class:`~gradientmail.torch.Exchange` asks for, for a DataLoader.

With ``Exchange(batch_size=)`` each learner should take ``exchange.batch_size`` items a step,
a number that follows its speed. A map-style dataset's DataLoader takes its batches from a
``batch_sampler``: :class:`ExchangeBatchSampler` is one that reads the size asked as it
fills each batch, so the DataLoader's workers, pinning and collation stay as they are.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Protocol

from torch.utils.data import Sampler

from gradientmail._errors import ConfigurationError

__all__ = ["ExchangeBatchSampler"]


class _HandsOutBatches(Protocol):
    def _hand_out_batch(self) -> int: ...


class ExchangeBatchSampler(Sampler[list[int]]):
    """Groups ``sampler``'s indices into batches of ``exchange.batch_size``, read as each
    batch is filled: ``DataLoader(dataset, batch_sampler=ExchangeBatchSampler(exchange,
    RandomSampler(dataset)))``.

    Guarantees:
        * Every index ``sampler`` yields is in exactly one batch, in order; the last batch
          of an epoch may be smaller, and is dropped with ``drop_last=True``.
        * A batch has the size the Exchange asked for when the batch was filled
          (``exchange.batch_size``). A DataLoader with ``num_workers`` > 0 fills batches
          ahead of the loop (``num_workers x prefetch_factor``), so a new size reaches the
          loop that many steps later; the Exchange's check of the batches taken accepts
          every batch this sampler made, however far ahead.

    Args:
        exchange: the :class:`~gradientmail.torch.Exchange`, made with ``batch_size=``.
        sampler: the indices, one epoch per iteration (``RandomSampler(dataset)``,
            ``DistributedSampler(dataset)``, or any iterable of ints).
        drop_last: drop an epoch's last batch when it is smaller than the size asked.

    Raises:
        ConfigurationError: an ``exchange`` that is not an Exchange or a ``sampler`` that
            is not iterable; when iterating, an Exchange made without ``batch_size=``.
    """

    def __init__(
        self, exchange: _HandsOutBatches, sampler: Iterable[int], *, drop_last: bool = False
    ) -> None:
        if not callable(getattr(exchange, "_hand_out_batch", None)):
            raise ConfigurationError(
                "ExchangeBatchSampler(exchange, sampler): the first argument must be the "
                f"Exchange, not {type(exchange).__name__}"
            )
        if not isinstance(sampler, Iterable):
            raise ConfigurationError(
                "ExchangeBatchSampler(exchange, sampler): the sampler must be an iterable "
                f"of indices (RandomSampler(dataset)), not {type(sampler).__name__}"
            )
        self.exchange = exchange
        self.sampler = sampler
        self.drop_last = drop_last

    def __iter__(self) -> Iterator[list[int]]:
        size = self.exchange._hand_out_batch()
        batch: list[int] = []
        for index in self.sampler:
            batch.append(index)
            if len(batch) >= size:
                yield batch
                batch = []
                size = self.exchange._hand_out_batch()
        if batch and not self.drop_last:
            yield batch

    def __len__(self) -> int:
        """Not known ahead: the sizes follow the learners' speeds (``TypeError``, as for a
        DataLoader over a stream)."""
        raise TypeError(
            "an ExchangeBatchSampler has no length: its batches follow exchange.batch_size; "
            "count the steps you take instead"
        )
