"""The consumer side of a ``shared_queue`` learner: iteration, and leaving.

:class:`SharedQueue` starts the learner's three parts (its lease, the loader thread and
the completions thread), turns the loader's buffer into items for the training loop, and
on close stops them in order: loader first, then pending completions, then the lease.
It touches the loader only through the buffer and the holdings.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from gradientmail._errors import BackendError, LeaseLostError
from gradientmail.mailbox import Mailbox
from gradientmail.patterns._leases import Lease
from gradientmail.patterns._progress import ProgressReporter
from gradientmail.patterns._run_layout import LEASES_PREFIX, RunLayout, check_manifest
from gradientmail.patterns._workers import HandoffBuffer, Worker
from gradientmail.patterns.shared_queue._buffer_entries import (
    Control,
    Failed,
    Fenced,
    UnitEnd,
    UnitStart,
    Wake,
)
from gradientmail.patterns.shared_queue._claim_pages import ClaimPages
from gradientmail.patterns.shared_queue._holdings import Holdings
from gradientmail.patterns.shared_queue._loader import ClaimLoop
from gradientmail.patterns.shared_queue._policy import ClaimPolicy
from gradientmail.patterns.shared_queue._recorder import CompletionRecorder
from gradientmail.patterns.shared_queue._stats import QueueStats
from gradientmail.patterns.shared_queue._unit_claims import UnitClaims

__all__ = ["SharedQueue"]

T = TypeVar("T")


class SharedQueue(Generic[T]):
    """The iterator ``shared_queue`` yields: items of the units this learner holds.

    Iterate it in the thread that entered the ``with`` block. ``stats`` is live telemetry.
    """

    #: A store error while releasing units on an early exit (they come back when the lease
    #: expires instead); ``None`` otherwise.
    release_error: BackendError | None = None

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
        epoch: int,
        lease: float,
        wait_for_others: bool = True,
        shared_order: bool = True,
    ) -> None:
        self.learner_id = learner_id
        self.epoch = epoch
        self.stats = QueueStats()
        self._settings = (mailbox, units, identifiers, load, wait_for_others, shared_order)
        self._reporter = reporter
        key = LEASES_PREFIX + learner_id
        self._lease = Lease(mailbox, key, learner_id, duration=lease, extra={"epoch": epoch})
        self._buffer: HandoffBuffer[T] = HandoffBuffer(prefetch)
        self._holdings = Holdings()
        self._closing = threading.Event()
        self._state = _State()
        self._parts: _Parts | None = None  # once started

    @property
    def _worker(self) -> str:
        return f"shared_queue loader of learner {self.learner_id!r}"

    def _start(self) -> None:
        """Check the manifest, take the lease, start the loader and the recorder."""
        mailbox, units, identifiers, load, wait_for_others, shared_order = self._settings
        check_manifest(mailbox, identifiers, units)
        self._lease.acquire()
        self._lease.start()
        claims = UnitClaims(
            mailbox, RunLayout(self.epoch), self.learner_id, self._lease.incarnation
        )
        pages = ClaimPages(mailbox, claims.layout.units, self.stats)
        loop = ClaimLoop(
            units=units,
            policy=ClaimPolicy(identifiers, self.learner_id, pages, shared_order=shared_order),
            claims=claims,
            lease=self._lease,
            load=load,
            buffer=self._buffer,
            holdings=self._holdings,
            stats=self.stats,
            reporter=self._reporter,
            closing=self._closing,
            wait_for_others=wait_for_others,
        )
        loader = Worker(f"gradientmail-shared-queue-{self.learner_id}", lambda _stop: loop.run())
        recorder = CompletionRecorder(
            claims,
            self._holdings,
            worker=self._worker,
            wake=self._buffer.put_control,
            recorded=self._count_completion,
        )
        self._parts = _Parts(loop, claims, loader, recorder)
        loader.start()
        recorder.start()

    def _count_completion(self) -> None:
        self.stats.units_completed += 1

    # -- consumer side ------------------------------------------------------------------------

    def __iter__(self) -> SharedQueue[T]:
        return self

    def __next__(self) -> T:
        state = self._state
        if state.done:
            raise StopIteration
        get = self._buffer.get
        stats = self.stats
        lease = self._lease
        reporter = self._reporter
        recorder = self._parts.recorder if self._parts is not None else None
        while True:
            if recorder is not None and recorder.error is not None:  # per item: kept cheap
                self._fail(recorder.error)
            entry, waited = get()
            if waited:
                stats.wait_s += waited
                if reporter is not None:
                    reporter.data_waited(waited)
            if not isinstance(entry, Control):
                try:
                    lease.ensure_fresh()  # never deliver an item of a unit we may have lost
                except LeaseLostError as exc:
                    self._fail(exc)
                stats.items_delivered += 1
                return entry  # type: ignore[return-value]  # not a Control: an item
            if isinstance(entry, UnitStart):
                if reporter is not None:
                    reporter.unit_started(entry.held.identifier)
            elif isinstance(entry, UnitEnd):
                stats.units_finished += 1
                if reporter is not None:
                    reporter.unit_finished(entry.held.identifier, entry.items)
                assert self._parts is not None
                self._parts.recorder.hand_over(entry.held)
            elif isinstance(entry, Wake):
                continue  # the loop's top raises the recorder's error
            elif isinstance(entry, Fenced):
                self._fail(entry.error)
            elif isinstance(entry, Failed):
                state.done = True
                entry.carried.reraise(self._worker, entry.context)
            else:
                parts = self._parts
                if parts is not None:
                    parts.recorder.flush()
                self._raise_recorded_failure()
                state.done = state.exhausted = True
                stats.run_complete = (
                    parts is not None and parts.claims.cas and not parts.loop.others_unfinished
                )
                raise StopIteration

    def _raise_recorded_failure(self) -> None:
        if self._parts is not None and self._parts.recorder.error is not None:
            self._fail(self._parts.recorder.error)

    def _fail(self, error: BaseException) -> None:
        """Stop iterating and raise ``error`` (a lost lease, or a failed completion)."""
        self._state.done = True
        raise error

    # -- leaving ------------------------------------------------------------------------------

    def close(self) -> None:
        """Stop prefetching, record pending completions, release or finish. Idempotent.

        Waits for at most the loader's current ``load`` step or mailbox call. Left before
        the end (not exhausted), it releases every unit it holds that is not done, so other
        learners take them at once. Store errors while releasing are kept in
        :attr:`release_error`: the units then come back when the lease expires.
        """
        state = self._state
        if state.closed:
            return
        state.closed = state.done = True
        self._closing.set()
        self._holdings.close()  # a loader waiting for completions stops waiting
        self._buffer.close()
        parts = self._parts
        if parts is not None:
            parts.loader.stop()
            parts.recorder.stop()
        self.stats.lease_renewals = self._lease.renewals
        recorded = parts.recorder.error if parts is not None else None
        if self._lease.lost or isinstance(recorded, LeaseLostError):
            return
        try:
            if state.exhausted:
                self._lease.end("finished")
            else:
                self._release_held()
                self._lease.end("released")
        except BackendError as exc:
            self.release_error = exc

    def _release_held(self) -> None:
        if self._parts is None:
            return
        claims = self._parts.claims
        for unit in self._holdings.take_all():
            if claims.release(unit):
                self.stats.units_released += 1
                if self._reporter is not None:
                    self._reporter.unit_released(unit.identifier)


@dataclass(frozen=True)
class _Parts:
    """What a started queue runs: the loader's loop and thread, its claims, the recorder."""

    loop: ClaimLoop
    claims: UnitClaims
    loader: Worker
    recorder: CompletionRecorder


class _State:
    """Where the consumer is: iterating, done (no more items), exhausted (the epoch
    ended, not left early), closed."""

    __slots__ = ("closed", "done", "exhausted")

    def __init__(self) -> None:
        self.done = False
        self.exhausted = False
        self.closed = False
