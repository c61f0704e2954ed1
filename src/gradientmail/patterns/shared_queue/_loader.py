"""The loader thread of a ``shared_queue`` learner: which unit next, and loading it.

Order of preference, each time the buffer has room:

1. units this learner held in an earlier incarnation (it restarted with the same id);
2. free units, in the learner's preference order, jumping elsewhere after a lost claim
   (see :mod:`gradientmail.patterns.shared_queue._policy`);
3. when none is free: units that were released, or whose owner's lease expired, taken
   over with compare-and-swap. While units are claimed but not done and none can be taken,
   the thread keeps watching the others' leases and idle markers (see
   :mod:`~gradientmail.patterns.shared_queue._waiting`), and ends only when every unit is
   done. So a learner that dies last still has its units finished by someone. With
   ``wait_for_others=False`` it ends instead (lockstep training: a rank waiting here for
   data while another waits for it in a collective would deadlock).

Without compare-and-swap, step 1 and 3 do not exist: claims are permanent and the thread
ends when no unit is free.

The loop is handed its siblings (the takeovers, the waiting, the idle watch), built with it
by :class:`~gradientmail.patterns.shared_queue._epoch.EpochRun`; it builds none. Every unit
it loads, claimed or taken over, it holds through one :meth:`ClaimLoop.hold`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from gradientmail._errors import LeaseLostError
from gradientmail.backends._options import redact
from gradientmail.patterns._workers import CarriedError, HandoffBuffer
from gradientmail.patterns.shared_queue._buffer_entries import (
    Exhausted,
    Failed,
    Fenced,
    UnitEnd,
    UnitStart,
)
from gradientmail.patterns.shared_queue._idle_markers import IdleWatch
from gradientmail.patterns.shared_queue._scope import Scope, Setup
from gradientmail.patterns.shared_queue._takeover import Next, Takeover
from gradientmail.patterns.shared_queue._unit_claims import Held
from gradientmail.patterns.shared_queue._waiting import Waiting

__all__ = ["ClaimLoop"]


class _LoadFailed(Exception):
    def __init__(self, context: str, original: BaseException) -> None:
        super().__init__(context)
        self.context = context
        self.original = original


#: Lost claims and loader failures at DEBUG.
_log = logging.getLogger(__name__)


class ClaimLoop:
    """The loader thread's work: claim, take over, load into ``buffer``.

    Every unit it holds is added to ``holdings`` (shared with the consumer side) before
    its first item is buffered, so the consumer can complete or release it.

    Args:
        scope: what the epoch's threads share.
        setup: the queue's arguments (the units, ``load``, the reporter).
        buffer: where the items go.
        takeover: this learner's takeovers (an earlier incarnation's units, released ones,
            the dead's).
        waiting: what to do when no unit is free.
        idle: this learner's idle watch (it lists the learners at the start).
        on_dry: called each time no unit is free (so a learner whose epochs flow opens
            the next).
    """

    def __init__(
        self,
        scope: Scope,
        setup: Setup,
        buffer: HandoffBuffer[Any],
        *,
        takeover: Takeover,
        waiting: Waiting,
        idle: IdleWatch,
        on_dry: Callable[[], None] = lambda: None,
    ) -> None:
        self.scope = scope
        self.buffer = buffer
        self.reporter = setup.reporter
        units, load = setup.units, setup.load
        self.items_of: Callable[[str], Iterable[Any]] = lambda ident: load(units[ident])
        self.on_dry = on_dry
        self.takeover = takeover
        self.waiting = waiting
        self.idle = idle
        #: The most units held at once: the buffer's, one being loaded, one being recorded,
        #: and those whose completions may wait for the gate.
        self.held_limit = buffer.capacity + 2 + setup.gate.slack

    @property
    def others_unfinished(self) -> bool:
        """Whether the thread ended while other learners still held unfinished units."""
        return self.waiting.others_unfinished

    # -- the thread ---------------------------------------------------------------------------

    def run(self) -> None:
        """Claim and load until every unit is done, the queue closes, or something fails."""
        context = "while claiming units"
        try:
            self.start()
            while True:
                if not self.buffer.wait_for_room():
                    return  # closed: make no new claim
                held = self.next_unit()
                if held is None:
                    break
                context = f"while loading unit {held.identifier!r}"
                if not self.load_unit(held):
                    return
                context = "while claiming units"
            self.buffer.put_control(Exhausted())
        except LeaseLostError as exc:
            self.buffer.put_control(Fenced(exc))
        except BaseException as exc:  # noqa: BLE001 - every failure must reach the consumer
            if isinstance(exc, _LoadFailed):
                context, exc = exc.context, exc.original
            _log.debug("loader of %r failed %s: %r", self.scope.claims.learner_id, context, exc)
            self.buffer.put_control(Failed(CarriedError.of(exc), context))

    def start(self) -> None:
        """The start of the epoch, in the loader thread: one scan of the claims and the
        completions (done units are skipped), the learners with a lease (the walk starts
        apart from theirs), and the units an earlier incarnation of this learner held (taken
        back first)."""
        claims, stats, policy = self.scope.claims, self.scope.stats, self.scope.policy
        scan = claims.scan()
        ids = policy.position
        done = sum(1 for ident in scan.done if ident in ids)
        stats.units_done_before += done  # summed over a flowing queue's epochs
        if done and done == len(ids):
            _log.info(
                "%r found epoch %d of the run at %s already complete (all %d units done): "
                "nothing to load",
                claims.learner_id,
                claims.layout.epoch,
                redact(claims.mailbox.url),
                done,
            )
        members = self.idle.learners()
        policy.begin(scan.claimed, members)
        if claims.cas and claims.incarnation > 1:
            # An earlier incarnation of this learner may have left units and a marker.
            self.idle.forget_predecessor()
            self.takeover.note_own(scan)

    # -- choosing the next unit ---------------------------------------------------------------

    def next_unit(self) -> Held | None:
        """The next unit to load, or ``None`` when every unit is done or the queue closed."""
        scope = self.scope
        if not scope.holdings.wait_at_most(self.held_limit) or scope.closing.is_set():
            # Completions are recorded by a background thread; without this bound a fast
            # loader and consumer could run far ahead of it, and a learner killed then
            # would leave many trained but unrecorded units to be trained again.
            return None
        takeover = self.takeover
        held = takeover.next_own() or takeover.next_found()
        if held is not None:
            return self.hold(held)
        policy = scope.policy
        while not scope.closing.is_set():
            p = policy.next()
            if p is not None:
                held = self.claim(p)
                if held is not None:
                    return self.hold(held)
                continue
            # No unit is free: every unit is claimed.
            self.on_dry()
            found = self.waiting.step()
            if found is Next.WAIT:
                self.waiting.pause()
            elif found is Next.END:
                return None
            elif isinstance(found, Held):
                return self.hold(found)
        return None

    def claim(self, p: int) -> Held | None:
        """Claim the unit at position ``p`` (not yet held); after a lost claim, ``None``."""
        scope = self.scope
        policy = scope.policy
        identifier = policy.identifiers[p]
        began = time.perf_counter()
        claims = scope.claims
        held = claims.claim(identifier)
        if held is not None:
            scope.stats.claim_latency.add(time.perf_counter() - began)
            policy.won(p)
            return held
        scope.stats.conflicts_lost += 1
        _log.debug(
            "%r lost the claim of unit %r to another learner", scope.claims.learner_id, identifier
        )
        policy.lost(p)
        return None

    def hold(self, held: Held) -> Held:
        """Register a unit this learner now holds, claimed or taken over; report it."""
        self.scope.holdings.add(held)
        self.scope.stats.units_claimed += 1
        if self.reporter is not None:
            self.reporter.unit_claimed(
                held.identifier, reclaimed=held.reclaimed, epoch=self.scope.claims.layout.epoch
            )
        return held

    # -- loading ------------------------------------------------------------------------------

    def load_unit(self, held: Held) -> bool:
        """Load one held unit into the buffer; ``False`` if the queue was closed."""
        buffer = self.buffer
        items = 0
        iterator: Iterator[Any] | None = None
        identifier = held.identifier
        try:
            buffer.put_control(UnitStart(held))
            iterator = iter(self.items_of(identifier))
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
            buffer.put_control(UnitEnd(held, items))
            return True
        except Exception as exc:
            raise _LoadFailed(f"in unit {identifier!r} after {items} item(s)", exc) from exc
        finally:
            close = getattr(iterator, "close", None)
            if close is not None:
                close()
