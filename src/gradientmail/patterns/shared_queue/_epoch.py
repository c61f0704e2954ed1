"""One epoch of a ``shared_queue`` learner: its loader thread, its completions, its buffer.

A learner runs one :class:`EpochRun` per open epoch, all under the learner's one lease: one
while it works in a single epoch, two while its epochs flow (it claims units of the next
epoch while the last units of the previous one are in progress elsewhere). Each run has
its own claims, claim policy, idle markers and takeovers, scoped to its epoch's keys, so
nothing of one epoch is ever recorded in another.

An epoch starts here: :meth:`EpochRun._build` builds every part of it (its claims, the
claim policy and its pages, the holdings, the scope, the lease watcher, the idle watch, the
pacing, the takeovers, the waiting, the loader's loop and the completion recorder) and
hands each the siblings it works with; no part builds another. :meth:`EpochRun.start`
starts the threads, and the loader's first requests are
:meth:`~gradientmail.patterns.shared_queue._loader.ClaimLoop.start`.

The consumer reads a run only through :meth:`EpochRun.take`, which never blocks: the
learner's :class:`~gradientmail.patterns.shared_queue._consumer.SharedQueue` waits on the
bell that every run's buffer rings.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Generic, TypeVar

from gradientmail._counting import Counting
from gradientmail._errors import LeaseLostError
from gradientmail.patterns._leases import Lease, LeaseWatcher
from gradientmail.patterns._patience import Patient
from gradientmail.patterns._run_layout import LEASES_PREFIX, RunLayout
from gradientmail.patterns._workers import EMPTY, Bell, HandoffBuffer, Worker
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
from gradientmail.patterns.shared_queue._idle_markers import IdleWatch
from gradientmail.patterns.shared_queue._loader import ClaimLoop
from gradientmail.patterns.shared_queue._pacing import Pacing
from gradientmail.patterns.shared_queue._policy import ClaimPolicy
from gradientmail.patterns.shared_queue._recorder import CompletionRecorder
from gradientmail.patterns.shared_queue._scope import Scope, Setup
from gradientmail.patterns.shared_queue._stats import SCANS, QueueStats
from gradientmail.patterns.shared_queue._takeover import Takeover
from gradientmail.patterns.shared_queue._unit_claims import UnitClaims
from gradientmail.patterns.shared_queue._waiting import Waiting

__all__ = ["EMPTY", "EpochRun", "Setup"]

T = TypeVar("T")


class EpochRun(Generic[T]):
    """One open epoch: claims, loads and records completions of its units.

    Guarantees: :meth:`take` returns this epoch's items in order, ``EMPTY`` while none is
    buffered, and raises ``StopIteration`` once, when the epoch ended and every completion
    of it is recorded; an error of the loader or the recorder is raised after the items
    buffered before it. :meth:`close` leaves the learner's lease alone.
    """

    def __init__(
        self,
        setup: Setup,
        epoch: int,
        identifiers: list[str],
        *,
        lease: Lease,
        stats: QueueStats,
        bell: Bell,
    ) -> None:
        self.setup = setup
        self.epoch = epoch
        #: Set once no unit of this epoch was free (units may still be in progress).
        self.dry = threading.Event()
        #: Once ended: every unit done (``False``: others held units, or claims are
        #: permanent, when this learner stopped waiting).
        self.complete = False
        self._bell = bell
        self._buffer: HandoffBuffer[T] = HandoffBuffer(setup.prefetch, bell)
        self._parts = self._build(identifiers, lease, stats)
        self._ended = False

    @property
    def worker(self) -> str:
        """The loader's name, for errors."""
        return f"shared_queue loader of learner {self.setup.learner_id!r}"

    def _build(self, identifiers: list[str], lease: Lease, stats: QueueStats) -> _Parts:
        """Build every part of the epoch, and hand each the siblings it works with.

        No part builds another. What the loader thread does first (its scan, the members,
        an earlier incarnation's units) is :meth:`ClaimLoop.start`.
        """
        setup = self.setup
        closing = threading.Event()
        # The loader and the recorder ride out a store outage shorter than the lease (past
        # it, this learner could not have renewed in time anyway); the lease renews on its
        # own schedule with the mailbox itself. Every request they send, each try of it, is
        # counted by the one door (the takeovers' scans under their own label).
        what = f"shared_queue learner {setup.learner_id!r}"
        counted = Counting(setup.mailbox, setup.tally)
        mailbox = Patient(counted, lease.duration, closing, what)
        scanning = Patient(
            Counting(setup.mailbox, setup.tally, label=SCANS), lease.duration, closing, what
        )
        layout = RunLayout(self.epoch)
        claims = UnitClaims(mailbox, layout, setup.learner_id, lease.incarnation)
        pages = ClaimPages(mailbox, layout.units)
        policy = ClaimPolicy(identifiers, setup.learner_id, pages, shared_order=setup.shared_order)
        scope = Scope(claims, lease, policy, Holdings(), stats, closing)
        # One watcher for the idle watch and the takeovers: a holder watched by the one can
        # be declared lost by the other.
        watcher = LeaseWatcher(mailbox, LEASES_PREFIX, duration=lease.duration)
        idle = IdleWatch(claims, watcher, lease.period)
        pacing = Pacing(lease.period, closing)
        scans = UnitClaims(scanning, layout, setup.learner_id, lease.incarnation)
        takeover = Takeover(scope, scans, watcher, idle, pacing)
        waiting = Waiting(
            scope,
            idle,
            takeover,
            pacing,
            wait_for_others=setup.wait_for_others,
            siblings=setup.siblings,
        )
        loop = ClaimLoop(
            scope,
            setup,
            self._buffer,
            takeover=takeover,
            waiting=waiting,
            idle=idle,
            on_dry=self._on_dry,
        )
        name = f"gradientmail-shared-queue-{setup.learner_id}-epoch-{self.epoch}"
        loader = Worker(name, lambda _stop: loop.run())
        recorder = CompletionRecorder(
            scope, gate=setup.gate, worker=self.worker, wake=self._buffer.put_control
        )
        return _Parts(scope, loop, loader, recorder)

    @property
    def error(self) -> BaseException | None:
        """The first failure recording a completion (where the last ones are recorded by
        :meth:`close`, this is where they are seen)."""
        return self._parts.recorder.error

    @property
    def completes_at_close(self) -> bool:
        """Whether the epoch's last completions may wait for items still downstream (its
        gate has slack): then :meth:`close`, not the end of :meth:`take`, records them."""
        return self.setup.gate.slack > 0

    def start(self) -> None:
        """Start the loader and the recorder threads."""
        self._parts.loader.start()
        self._parts.recorder.start()

    def _on_dry(self) -> None:
        if not self.dry.is_set():
            self.dry.set()
            self._bell.ring()

    def take(self) -> T | object:
        """The next item of this epoch, or ``EMPTY``; never blocks.

        Raises:
            StopIteration: the epoch ended (once; then ``EMPTY``).
            LeaseLostError: this learner's units were taken over.
            WorkerError: the loader or a completion failed.
        """
        parts = self._parts
        lease = parts.scope.lease
        get = self._buffer.get
        while True:
            if parts.recorder.error is not None:  # per item: kept cheap
                raise parts.recorder.error
            entry, _ = get(block=False)
            if not isinstance(entry, Control):
                if entry is not EMPTY:
                    lease.ensure_fresh()  # never deliver an item of a unit we may have lost
                return entry
            reporter = self.setup.reporter
            if isinstance(entry, UnitStart):
                if reporter is not None:
                    reporter.unit_started(entry.held.identifier, epoch=self.epoch)
            elif isinstance(entry, UnitEnd):
                parts.scope.stats.units_finished += 1
                if reporter is not None:
                    reporter.unit_finished(entry.held.identifier, entry.items, epoch=self.epoch)
                parts.recorder.hand_over(entry.held)
            elif isinstance(entry, Wake):
                continue  # the loop's top raises the recorder's error
            elif isinstance(entry, Fenced):
                raise entry.error
            elif isinstance(entry, Failed):
                entry.carried.reraise(self.worker, entry.context)
            else:  # Exhausted: the loader found the epoch over
                if not self.completes_at_close:
                    # Else the last completions wait for items still downstream, which may
                    # wait for this very call to return: close() records them.
                    parts.recorder.flush()
                    if parts.recorder.error is not None:
                        raise parts.recorder.error
                self._ended = True
                self.complete = parts.scope.claims.cas and not parts.loop.others_unfinished
                raise StopIteration

    def close(self) -> bool:
        """Stop the threads, record pending completions, release what is held unless the
        epoch ended. Whether this learner was fenced (then nothing is released).

        Raises:
            BackendError: releasing failed (the units come back when the lease expires).
        """
        parts = self._parts
        parts.scope.closing.set()
        parts.scope.holdings.close()  # a loader waiting for completions stops waiting
        self._buffer.close()
        parts.loader.stop()
        parts.recorder.stop()
        if parts.scope.lease.lost or isinstance(parts.recorder.error, LeaseLostError):
            return True
        if not self._ended or self.completes_at_close:
            # Ended, it may still hold units whose items were dropped downstream.
            self._release_held()
        return False

    def _release_held(self) -> None:
        scope = self._parts.scope
        reporter = self.setup.reporter
        for unit in scope.holdings.take_all():
            if scope.claims.release(unit):
                scope.stats.units_released += 1
                if reporter is not None:
                    reporter.unit_released(unit.identifier, epoch=self.epoch)


@dataclass(frozen=True)
class _Parts:
    """What a started epoch runs: what its threads share, the loader's loop and thread, the
    recorder."""

    scope: Scope
    loop: ClaimLoop
    loader: Worker
    recorder: CompletionRecorder
