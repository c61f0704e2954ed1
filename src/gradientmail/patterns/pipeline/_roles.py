"""The roles of a pipeline: :class:`Producer` and :class:`Consumer` handles, and the
:class:`Transport` each transport (in process, over a mailbox) implements to make them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

from gradientmail._errors import PipelineError
from gradientmail.patterns.pipeline._stats import ConsumerStats, ProducerStats

__all__ = ["Consumer", "Decode", "Producer", "Transport"]

T = TypeVar("T")
#: What ``decode=`` is: applied to each item before a consumer returns it.
Decode = Callable[[Any], Any]


class Producer(ABC, Generic[T]):
    """One registered producer. Use it as a context manager, or call ``done``/``fail``.

    Leaving the ``with`` block normally calls ``done()``; leaving it through an exception
    calls ``fail(exc)`` and lets the exception continue in the producer. A handle is used
    by one thread at a time; give each producing thread its own declared id.
    """

    def __init__(self, producer_id: str, stats: ProducerStats) -> None:
        self.id = producer_id
        self.stats = stats
        self._finished = False

    @abstractmethod
    def put(self, item: T) -> None:
        """Add one item, waiting while the pipeline is full.

        Raises:
            PipelineAbortedError: the pipeline failed or was aborted, or this producer was
                declared lost.
            PipelineStalledError: no room appeared for ``stall_timeout`` seconds.
            PipelineError: this producer has already finished.
        """

    @abstractmethod
    def done(self) -> None:
        """Mark this producer finished after its last item. Idempotent."""

    @abstractmethod
    def fail(self, error: BaseException) -> None:
        """Mark this producer failed: consumers raise ``ProducerFailedError`` after its items."""

    def _check_open(self) -> None:
        if self._finished:
            raise PipelineError(
                f"producer {self.id!r} has already finished; put() after done() or fail() "
                "would be lost"
            )

    def __enter__(self) -> Producer[T]:
        return self

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        if exc is None:
            self.done()
        elif not self._finished:
            self.fail(exc)


class Consumer(ABC, Generic[T]):
    """One consumer: iterate it to take items until the pipeline ends.

    Iteration stops when every declared producer has finished and every item is taken.
    It raises ``ProducerFailedError`` (after the failed producer's items),
    ``PipelineStalledError`` or ``PipelineAbortedError``. Use it as a context manager so
    that a mailbox consumer's prefetch thread is stopped when you leave early. A handle is
    iterated by one thread; open one consumer per consuming thread.
    """

    def __init__(self, consumer_id: str, stats: ConsumerStats) -> None:
        self.id = consumer_id
        self.stats = stats

    def __iter__(self) -> Iterator[T]:
        return self

    @abstractmethod
    def __next__(self) -> T: ...

    def close(self) -> None:
        """Stop taking items.

        A mailbox consumer hands the items it had prefetched and not returned to the other
        consumers, which take them over. Close every consumer you stop iterating early
        (use ``with``): until then the others wait for its prefetched items before they end.
        """

    def __enter__(self) -> Consumer[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Transport(ABC, Generic[T]):
    """How items travel: what :class:`Pipeline` asks of the in-process and mailbox transports.

    :class:`Pipeline` has already checked the ids it passes (valid, and for ``producer`` one
    of ``declared``); the transport refuses a second registration of one id.
    """

    declared: tuple[str, ...]

    @abstractmethod
    def producer(self, producer_id: str) -> Producer[T]:
        """Register ``producer_id`` and return its handle (``ProducerRegistrationError`` if
        it has already registered)."""

    @abstractmethod
    def consumer(self, consumer_id: str, decode: Decode | None) -> Consumer[Any]:
        """Open a consumer that applies ``decode`` (if given) to each item."""

    @abstractmethod
    def abort(self, reason: str) -> None:
        """Stop the pipeline: every producer and consumer raises ``PipelineAbortedError``."""
