"""``shared_queue``: learners of unequal speed share one fixed list of units, each exactly once.

Every learner runs the same loop over the same ``units`` mapping::

    from gradientmail.patterns.shared_queue import shared_queue

    with shared_queue(units, mailbox=box, learner_id="node-0", load=load_unit) as batches:
        for item in batches:      # whatever load(unit) yields, in order
            train(item)

A learner owns a unit once it has created ``units/{identifier}`` with ``put_if_absent``; so
a fast learner simply claims more units, and no learner needs to know another's speed.

Guarantees
    * **Exactly once.** A unit is loaded only by the learner whose ``put_if_absent`` created
      its claim. After creating it, the learner reads the claim back and checks the token it
      wrote; if another claim is stored the store is not atomic, and the queue raises
      :class:`~gradientmail.errors.AtomicityViolationError` (carried as below) instead of
      loading. Reservations are permanent for a run: a unit claimed by a learner that then
      fails is not retried. A new run uses a new mailbox prefix.
    * **Prefetch bound.** A background thread claims units and runs ``load(unit)``. It pulls
      an item from the loader only when fewer than ``prefetch`` items are buffered, and it
      claims the next unit only then too, so the loader is never more than ``prefetch``
      items ahead of the consumer.
    * **End.** When, after a fresh listing of ``units/``, no unit is left unclaimed, the
      thread ends; the consumer drains the buffer and iteration stops.
    * **Errors.** An exception from ``load`` (creating or iterating it) or from the mailbox
      reaches the consumer *after* every item buffered before it, as a
      :class:`~gradientmail.patterns.common.WorkerError` whose ``__cause__`` is the original
      exception and whose message ends with the loader thread's traceback. Errors are never
      swallowed and never become ``None`` items.
    * **Exit.** Leaving the ``with`` block (normally, by an exception, or by ``break``) stops
      the thread: it finishes at most its current ``load`` step or mailbox call, closes the
      unit's iterator (so ``finally`` blocks in a generator run), makes no new claim, and
      has ended when ``__exit__`` returns.

Claim order and cost
    Learners try units in the mapping's order, or in their own ``order=`` (a preference
    over the same identifiers; identifiers it leaves out follow in mapping order). A learner
    keeps a local view of which units are taken: one listing of ``units/`` when it starts,
    plus what its own claims teach it. When a claim is lost (someone else took the unit),
    the learner refreshes the view with one listing and moves to a point inside the largest
    run of units still free in its order, so concurrent learners spread over the order
    instead of racing for the same next unit; a learner that never loses follows its order
    exactly. A listing is also taken before concluding that nothing is left. So a claimed
    unit costs one ``put_if_absent`` and one read-back, plus a share of a few listings per
    learner, and that cost does not grow with the number of units.

Progress for ``gradientmail status``
    The queue writes ``manifest`` (``{"units": total}``) with ``put_if_absent`` when it
    starts, so status can count units left. It reports each unit's claim, start (its first
    item reaching the consumer) and finish (the consumer asking for the item after its last)
    to a :class:`~gradientmail.session.Session`: the one passed as ``session=``, or else the
    innermost ``Session`` with the same ``learner_id`` entered in the current thread, which
    makes ``with session, shared_queue(...) as batches:`` work without extra arguments.
"""

from __future__ import annotations

import hashlib
import json
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from gradientmail.errors import ConfigurationError, NotSupportedError
from gradientmail.keys import validate_segment
from gradientmail.mailbox import Capability, Mailbox
from gradientmail.patterns.claims import claim
from gradientmail.patterns.progress import (
    MANIFEST_KEY,
    UNITS_PREFIX,
    ProgressReporter,
    active_reporter,
)
from gradientmail.patterns.stats import Latencies, Stats
from gradientmail.patterns.workers import CarriedError, HandoffBuffer

__all__ = [
    "MANIFEST_KEY",
    "UNITS_PREFIX",
    "ProgressReporter",
    "QueueStats",
    "SharedQueue",
    "shared_queue",
    "validate_segment",
]

U = TypeVar("U")
T = TypeVar("T")


@dataclass
class QueueStats(Stats):
    """A learner's queue telemetry. Read ``queue.stats`` at any time, or ``.snapshot()``."""

    #: claims this learner won (and verified).
    units_claimed: int = 0
    #: units whose every item the consumer took.
    units_finished: int = 0
    #: items returned by ``next()``.
    items_delivered: int = 0
    #: seconds the consumer spent blocked in ``next()`` waiting for an item.
    wait_s: float = 0.0
    #: seconds per won claim: the ``put_if_absent`` plus its read-back.
    claim_latency: Latencies = field(default_factory=Latencies)
    #: claims lost because another learner had created the unit first.
    conflicts_lost: int = 0
    #: listings of ``units/`` taken to refresh the local view.
    listings: int = 0
    #: keys read by those listings.
    listed_keys: int = 0


# -- the local view of claims -----------------------------------------------------------------


class _View:
    """Which units this learner believes are taken, by position in its preference order."""

    def __init__(self, identifiers: list[str], learner_id: str) -> None:
        self.identifiers = identifiers
        self.position = {ident: p for p, ident in enumerate(identifiers)}
        self.taken = bytearray(len(identifiers))  # 1 = known claimed by someone
        self.next = 0
        seed = hashlib.sha256(learner_id.encode("utf-8")).digest()
        self.rng = random.Random(seed)

    def refresh(self, mailbox: Mailbox, stats: QueueStats) -> None:
        """Mark every unit with a claim key as taken (one paged listing of ``units/``)."""
        start = len(UNITS_PREFIX)
        listed = 0
        for key in mailbox.list(UNITS_PREFIX):
            listed += 1
            p = self.position.get(key[start:])
            if p is not None:
                self.taken[p] = 1
        stats.listings += 1
        stats.listed_keys += listed

    def candidate(self) -> int | None:
        """The next position believed free, continuing in order; else any free position."""
        p = self.taken.find(0, self.next)
        if p >= 0:
            return p
        return self.spread()

    def spread(self) -> int | None:
        """Move into the largest run of free positions; ``None`` if none is free.

        The start is a random point in the middle half of the run (seeded by the learner
        id), so learners that lost the same claim go different ways.
        """
        taken = self.taken
        best_start, best_len = -1, 0
        p = taken.find(0)
        while p >= 0:
            end = taken.find(1, p)
            if end < 0:
                end = len(taken)
            if end - p > best_len:
                best_start, best_len = p, end - p
            p = taken.find(0, end)
        if best_len == 0:
            return None
        offset = int(best_len * self.rng.uniform(0.25, 0.75)) if best_len > 2 else 0
        self.next = best_start + offset
        return self.next


# -- buffer entries other than items ----------------------------------------------------------


class _Control:
    __slots__ = ()


class _UnitStart(_Control):
    __slots__ = ("identifier",)

    def __init__(self, identifier: str) -> None:
        self.identifier = identifier


class _UnitEnd(_Control):
    __slots__ = ("identifier", "items")

    def __init__(self, identifier: str, items: int) -> None:
        self.identifier = identifier
        self.items = items


class _Failed(_Control):
    __slots__ = ("carried", "context")

    def __init__(self, carried: CarriedError, context: str) -> None:
        self.carried = carried
        self.context = context


class _Exhausted(_Control):
    __slots__ = ()


_EXHAUSTED = _Exhausted()


# -- the queue --------------------------------------------------------------------------------


class SharedQueue(Generic[T]):
    """The iterator ``shared_queue`` yields: items of the units this learner claims.

    Iterate it in the thread that entered the ``with`` block. ``stats`` is live telemetry.
    """

    def __init__(
        self,
        units: Mapping[str, Any],
        identifiers: list[str],
        *,
        mailbox: Mailbox,
        learner_id: str,
        load: Callable[[Any], Iterable[T]],
        prefetch: int,
        reporter: ProgressReporter | None,
    ) -> None:
        self.learner_id = learner_id
        self.stats = QueueStats()
        self._units = units
        self._mailbox = mailbox
        self._load = load
        self._reporter = reporter
        self._view = _View(identifiers, learner_id)
        self._buffer: HandoffBuffer[T] = HandoffBuffer(prefetch)
        self._done = False
        self._worker = f"shared_queue loader of learner {learner_id!r}"
        self._thread = threading.Thread(
            target=self._run, name=f"gradientmail-shared-queue-{learner_id}", daemon=True
        )

    def _start(self) -> None:
        self._thread.start()

    # -- consumer side --------------------------------------------------------------------

    def __iter__(self) -> SharedQueue[T]:
        return self

    def __next__(self) -> T:
        if self._done:
            raise StopIteration
        get = self._buffer.get
        stats = self.stats
        while True:
            entry, waited = get()
            if waited:
                stats.wait_s += waited
            if not isinstance(entry, _Control):
                stats.items_delivered += 1
                return entry  # type: ignore[return-value]
            if isinstance(entry, _UnitStart):
                if self._reporter is not None:
                    self._reporter.unit_started(entry.identifier)
            elif isinstance(entry, _UnitEnd):
                stats.units_finished += 1
                if self._reporter is not None:
                    self._reporter.unit_finished(entry.identifier, entry.items)
            elif isinstance(entry, _Failed):
                self._done = True
                entry.carried.reraise(self._worker, entry.context)
            else:
                self._done = True
                raise StopIteration

    def close(self) -> None:
        """Stop prefetching and wait for the loader thread to end. Idempotent.

        Waits for at most the loader's current ``load`` step or mailbox call.
        """
        self._done = True
        self._buffer.close()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()

    # -- loader side ----------------------------------------------------------------------

    def _run(self) -> None:
        context = "while claiming units"
        try:
            self._write_manifest()
            view = self._view
            view.refresh(self._mailbox, self.stats)
            refreshed = True  # the view has not learnt anything from a failure since
            while True:
                if not self._buffer.wait_for_room():
                    return  # closed: make no new claim
                p = view.candidate()
                if p is None:
                    if refreshed:
                        break
                    view.refresh(self._mailbox, self.stats)
                    refreshed = True
                    continue
                identifier = view.identifiers[p]
                context = f"while claiming unit {identifier!r}"
                if not self._claim(identifier):
                    view.taken[p] = 1
                    self.stats.conflicts_lost += 1
                    view.refresh(self._mailbox, self.stats)
                    refreshed = True
                    view.spread()
                    continue
                view.taken[p] = 1
                view.next = p + 1
                refreshed = False
                if not self._load_unit(identifier):
                    return
                context = "while claiming units"
            self._buffer.put_control(_EXHAUSTED)
        except BaseException as exc:  # noqa: BLE001 - every failure must reach the consumer
            if isinstance(exc, _LoadFailed):
                context, exc = exc.context, exc.original
            self._buffer.put_control(_Failed(CarriedError.of(exc), context))

    def _write_manifest(self) -> None:
        body = {"units": len(self._units), "created_at": time.time()}
        self._mailbox.put_if_absent(MANIFEST_KEY, json.dumps(body).encode("utf-8"))

    def _claim(self, identifier: str) -> bool:
        start = time.perf_counter()
        won = claim(self._mailbox, UNITS_PREFIX + identifier, self.learner_id)
        if won:
            self.stats.claim_latency.add(time.perf_counter() - start)
            self.stats.units_claimed += 1
            if self._reporter is not None:
                self._reporter.unit_claimed(identifier)
        return won

    def _load_unit(self, identifier: str) -> bool:
        """Load one claimed unit into the buffer; ``False`` if the queue was closed."""
        buffer = self._buffer
        items = 0
        iterator: Iterator[T] | None = None
        try:
            buffer.put_control(_UnitStart(identifier))
            iterator = iter(self._load(self._units[identifier]))
            while True:
                if not buffer.wait_for_room():
                    return False
                try:
                    item = next(iterator)
                except StopIteration:
                    break
                if not buffer.put(item):
                    return False
                items += 1
            buffer.put_control(_UnitEnd(identifier, items))
            return True
        except Exception as exc:
            raise _LoadFailed(f"in unit {identifier!r} after {items} item(s)", exc) from exc
        finally:
            close = getattr(iterator, "close", None)
            if close is not None:
                close()


class _LoadFailed(Exception):
    """Internal: carries the unit context of a loader failure to ``_run``."""

    def __init__(self, context: str, original: BaseException) -> None:
        super().__init__(context)
        self.context = context
        self.original = original


def _preference(units: Mapping[str, Any], order: Sequence[str] | None) -> list[str]:
    identifiers = [validate_segment(ident, "unit identifier") for ident in units]
    if order is None:
        return identifiers
    if isinstance(order, str):
        raise ConfigurationError(
            f"order must be a sequence of unit identifiers, not the string {order!r}"
        )
    preferred: list[str] = []
    seen: set[str] = set()
    for ident in order:
        if ident not in units:
            raise ConfigurationError(
                f"order names {ident!r}, which is not a key of units; order is a preference "
                "over the same identifiers as units"
            )
        if ident in seen:
            raise ConfigurationError(f"order names {ident!r} more than once")
        seen.add(ident)
        preferred.append(ident)
    preferred.extend(ident for ident in identifiers if ident not in seen)
    return preferred


@contextmanager
def shared_queue(
    units: Mapping[str, U],
    *,
    mailbox: Mailbox,
    learner_id: str,
    load: Callable[[U], Iterable[T]],
    prefetch: int = 8,
    order: Sequence[str] | None = None,
    session: ProgressReporter | None = None,
) -> Iterator[SharedQueue[T]]:
    """Share ``units`` among learners: yield the items of the units this learner claims.

    Args:
        units: identifier → unit value, the same mapping (and order) on every learner.
            Identifiers become key segments (``units/{identifier}``).
        mailbox: the run's mailbox; every learner of the run opens the same URL.
        learner_id: this learner's name, recorded in its claims (one key segment).
        load: ``load(unit)`` returns an iterable of items, run in a background thread.
        prefetch: the most items the loader may be ahead of the consumer (at least 1).
        order: this learner's preference order over the identifiers; ones it omits are
            tried afterwards in mapping order.
        session: where to report unit progress; by default the innermost
            :class:`~gradientmail.session.Session` for ``learner_id`` entered in this thread.

    Yields:
        A :class:`SharedQueue`: iterate it for the items; ``.stats`` is its telemetry.

    Raises:
        InvalidKeyError: an identifier or ``learner_id`` is not a valid key segment (raised
            before anything is claimed; the message names the identifier).
        ConfigurationError: ``prefetch`` is not a positive int, or ``order`` names an
            unknown or repeated identifier.
        NotSupportedError: the mailbox does not declare ``Capability.ATOMIC_CREATE``.
        WorkerError: from iteration, after the items buffered before it, when ``load`` or
            the mailbox failed; the original exception is its ``__cause__``.
    """
    if not isinstance(units, Mapping):
        raise ConfigurationError(
            f"units must be a mapping of identifier -> unit, not {type(units).__name__}; "
            "e.g. {f'shard-{i:05d}': path for i, path in enumerate(paths)}"
        )
    if not mailbox.supports(Capability.ATOMIC_CREATE):
        raise NotSupportedError(
            f"shared_queue over {mailbox.url} needs atomic put_if_absent "
            "(Capability.ATOMIC_CREATE), which this mailbox does not declare; without it two "
            "learners could both claim one unit"
        )
    validate_segment(learner_id, "learner id")
    if isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 1:
        raise ConfigurationError(f"prefetch must be a positive int, not {prefetch!r}")
    if not callable(load):
        raise ConfigurationError(f"load must be callable (unit -> iterable of items): {load!r}")
    identifiers = _preference(units, order)
    reporter = session if session is not None else active_reporter(learner_id)
    queue: SharedQueue[T] = SharedQueue(
        units,
        identifiers,
        mailbox=mailbox,
        learner_id=learner_id,
        load=load,
        prefetch=prefetch,
        reporter=reporter,
    )
    queue._start()
    try:
        yield queue
    finally:
        queue.close()
