"""The pipeline API: :class:`Pipeline`, which hands out :class:`Producer` and
:class:`Consumer` handles (defined in :mod:`~gradientmail.patterns.pipeline._roles`, with
:class:`Transport`, the interface each transport implements).

The guarantees are stated in the package docstring and, with the termination protocol and
why simpler protocols fail, in ``docs/pipeline.md``.
"""

from __future__ import annotations

import itertools
import os
import socket
import threading
from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar, overload

from gradientmail._errors import (
    ConfigurationError,
    InvalidKeyError,
    ProducerRegistrationError,
)
from gradientmail._keys import validate_segment
from gradientmail.backends._options import positive
from gradientmail.mailbox import Mailbox
from gradientmail.patterns.pipeline._roles import Consumer, Producer, Transport
from gradientmail.patterns.pipeline._stats import ConsumerStats, PipelineStats, ProducerStats

__all__ = ["Pipeline", "check_id"]

T = TypeVar("T")
U = TypeVar("U")

DEFAULT_STALL = 600.0
#: Numbers the default consumer ids of this process, across pipeline handles: over a mailbox
#: each open consumer holds a lease named by its id, so two may not share one.
_consumer_numbers = itertools.count(1)


def check_id(value: object, what: str) -> str:
    """Return ``value`` if it can name a producer or consumer, else raise.

    The rule is gradientmail's one ID rule, :func:`gradientmail._keys.validate_segment` (the
    id becomes one key segment): any non-empty ``str`` without ``/``, backslash or control
    characters, other than ``.`` and ``..``.

    Raises:
        ConfigurationError: naming the id and the rule it breaks, with the
            :class:`~gradientmail._errors.InvalidKeyError` chained.
    """
    try:
        return validate_segment(value, what)
    except InvalidKeyError as exc:
        raise ConfigurationError(f"{what} {value!r} is not a valid id: {exc.rule}") from exc


def _check_declared(producers: Iterable[str]) -> tuple[str, ...]:
    if isinstance(producers, str):
        raise ConfigurationError(
            f"producers must be a collection of ids, not the string {producers!r}; "
            f"write producers=[{producers!r}]"
        )
    if not isinstance(producers, Iterable):
        raise ConfigurationError(
            f"producers must be a collection of producer ids (a list or tuple), not "
            f"{type(producers).__name__} {producers!r}"
        )
    declared = tuple(check_id(p, "producer id") for p in producers)
    if not declared:
        raise ConfigurationError("producers must declare at least one producer id")
    duplicates = sorted({p for p in declared if declared.count(p) > 1})
    if duplicates:
        raise ConfigurationError(f"producer ids must be unique; repeated: {duplicates}")
    return declared


class Pipeline(Generic[T]):
    """A producer/consumer pipeline; make one with :meth:`in_process` or :meth:`over_mailbox`."""

    def __init__(self, transport: Transport[T]) -> None:
        self._transport = transport
        self._lock = threading.Lock()
        self._producers: dict[str, ProducerStats] = {}
        self._consumers: dict[str, ConsumerStats] = {}

    @classmethod
    def in_process(
        cls,
        producers: Iterable[str],
        *,
        capacity: int = 16,
        stall_timeout: float | None = DEFAULT_STALL,
    ) -> Pipeline[Any]:
        """A pipeline between threads of this process; items travel by reference.

        Nothing is copied or serialized, so items may be GPU tensors.

        Args:
            producers: the ids of every producer that will register (see the package doc).
            capacity: the most items put and not yet taken; a producer waits beyond it.
            stall_timeout: seconds a consumer waits for one item, or a producer for room,
                before raising ``PipelineStalledError``; ``None`` waits forever.

        Raises:
            ConfigurationError: a bad argument or producer id.
        """
        # Imported here: the transports subclass the interfaces above.
        from gradientmail.patterns.pipeline._in_process import InProcessTransport

        declared = _check_declared(producers)
        positive(capacity, "capacity", integer=True)
        positive(stall_timeout, "stall_timeout", allow_none=True)
        return Pipeline(InProcessTransport(declared, capacity, stall_timeout))

    @classmethod
    def over_mailbox(
        cls,
        mailbox: Mailbox,
        producers: Iterable[str],
        *,
        capacity: int = 16,
        stall_timeout: float | None = DEFAULT_STALL,
        prefetch: int = 2,
        heartbeat_interval: float = 1.0,
        lease: float = 15.0,
        poll_interval: float = 0.05,
    ) -> Pipeline[bytes]:
        """A pipeline of ``bytes`` through ``mailbox``, across threads, processes and hosts.

        Open one handle per process on the same mailbox URL with the same arguments. Each
        item is claimed with ``put_if_absent`` and the claim is read back, so each is
        delivered exactly once; the items a consumer that dies had prefetched are taken
        over by the others (``docs/pipeline.md`` says exactly what is guaranteed then).

        Args:
            mailbox: the run's mailbox; a new run needs a new, empty namespace.
            producers: the ids of every producer that will register (see the package doc).
            capacity: the bound on unclaimed items, enforced per producer as
                ``ceil(capacity / len(producers))`` (see Backpressure in ``docs/pipeline.md``).
            stall_timeout: see :meth:`in_process`.
            prefetch: items a consumer claims and reads ahead of its loop.
            heartbeat_interval: seconds between renewals of each producer's and consumer's
                lease (see :class:`gradientmail.patterns._leases.Lease`); also how often
                producers and idle consumers look for an abort or a dead peer.
            lease: seconds a producer's or consumer's lease may go unrenewed, by another
                consumer's clock, before that consumer declares it lost: a lost producer
                ends the run with ``ProducerLostError``, a lost consumer's prefetched items
                are taken over. A process paused longer than this is fenced.
            poll_interval: the longest pause between polls of the store when idle (polls
                start at a millisecond and back off to this).

        Raises:
            ConfigurationError: a bad argument; a producer id too long for this mailbox's
                keys; or the mailbox already holds a pipeline declared with other producers
                or capacity.
            NotSupportedError: the mailbox does not declare ``Capability.ATOMIC_CREATE``,
                so claims could not make delivery exactly once.
        """
        # Imported here: the transports subclass the interfaces above, and in-process users
        # need not load the mailbox transport.
        from gradientmail.patterns.pipeline._mailbox_run import MailboxSettings
        from gradientmail.patterns.pipeline._over_mailbox import MailboxTransport

        declared = _check_declared(producers)
        settings = MailboxSettings(
            capacity, stall_timeout, prefetch, heartbeat_interval, lease, poll_interval
        )
        return Pipeline(MailboxTransport(mailbox, declared, settings))

    @property
    def producer_ids(self) -> tuple[str, ...]:
        """The declared producer ids."""
        return self._transport.declared

    def producer(self, producer_id: str) -> Producer[T]:
        """Register producer ``producer_id`` and return its handle.

        Raises:
            ProducerRegistrationError: the id was not declared, or has already registered.
            ConfigurationError: the id is not a valid id.
        """
        check_id(producer_id, "producer id")
        if producer_id not in self._transport.declared:
            raise ProducerRegistrationError(
                f"producer {producer_id!r} was not declared; this pipeline accepts only "
                f"{list(self._transport.declared)} (late registration is refused, so that "
                "consumers can know when every producer is done)"
            )
        handle = self._transport.producer(producer_id)
        with self._lock:
            self._producers[producer_id] = handle.stats
        return handle

    @overload
    def consumer(self, consumer_id: str | None = None) -> Consumer[T]: ...

    @overload
    def consumer(
        self, consumer_id: str | None = None, *, decode: Callable[[T], U]
    ) -> Consumer[U]: ...

    def consumer(
        self, consumer_id: str | None = None, *, decode: Callable[[Any], Any] | None = None
    ) -> Consumer[Any]:
        """Open a consumer. Any number may be open, in any threads or processes.

        Args:
            consumer_id: a name for statistics, claims and (over a mailbox) the consumer's
                lease; two consumers open at once must not share one. Defaults to
                ``{hostname}-{pid}-{n}``, unique in this process. Reopening an id after its
                consumer closed or died continues as a new incarnation of it.
            decode: applied to each item before the consumer returns it (bytes to tensors,
                say). Over a mailbox it runs in the prefetch thread, ahead of the loop, so
                the loop gets ready items; an error in it reaches the loop as a
                ``WorkerError`` with the original chained. In process it runs in the
                consumer's thread, and its errors propagate as they are.

        Raises:
            ConfigurationError: the id is not a valid id, or ``decode`` is not callable;
                over a mailbox, the id is too long for its keys, or a live consumer holds
                it (seen renewing its lease for about one ``heartbeat_interval``).
        """
        if consumer_id is None:
            host = socket.gethostname().split(".")[0] or "host"
            consumer_id = f"{host}-{os.getpid()}-{next(_consumer_numbers)}"
        check_id(consumer_id, "consumer id")
        if decode is not None and not callable(decode):
            raise ConfigurationError(f"decode must be callable, not {type(decode).__name__}")
        handle = self._transport.consumer(consumer_id, decode)
        with self._lock:
            self._consumers[consumer_id] = handle.stats
        return handle

    def abort(self, reason: str = "aborted by the user") -> None:
        """Stop the pipeline: consumers and producers raise ``PipelineAbortedError``."""
        self._transport.abort(reason)

    def stats(self) -> PipelineStats:
        """Counters of the producers and consumers opened through this handle (copies)."""
        with self._lock:
            return PipelineStats(
                producers={k: v.snapshot() for k, v in self._producers.items()},
                consumers={k: v.snapshot() for k, v in self._consumers.items()},
            )
