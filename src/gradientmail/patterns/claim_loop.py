"""The loader thread of a ``shared_queue`` learner: which unit next, and loading it.

Order of preference, each time the buffer has room:

1. units this learner held in an earlier incarnation (it restarted with the same id);
2. free units, in the learner's preference order, jumping elsewhere after a lost claim
   (see :mod:`gradientmail.patterns.claim_view`);
3. when none is free: units that were released, or whose owner's lease expired, taken
   over with compare-and-swap. While units are claimed but not done and none can be taken,
   the thread keeps watching the others' leases and idle markers (see
   :mod:`gradientmail.patterns.idle_watch`), and ends only when every unit is done. So a
   learner that dies last still has its units finished by someone. With
   ``wait_for_others=False`` it ends instead (lockstep training: a rank waiting here for
   data while another waits for it in a collective would deadlock).

Without compare-and-swap, step 1 and 3 do not exist: claims are permanent and the thread
ends when no unit is free.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from gradientmail.errors import LeaseLostError
from gradientmail.patterns.buffer_entries import (
    Exhausted,
    Failed,
    Fenced,
    UnitEnd,
    UnitStart,
    Wake,
)
from gradientmail.patterns.claim_view import PROBES_BEFORE_LISTING, View, lists_from_a_key
from gradientmail.patterns.claims import ClaimRecord
from gradientmail.patterns.idle_watch import POLLS_PER_SECOND, IdleWatch
from gradientmail.patterns.leases import RENEWALS_PER_LEASE, Lease, LeaseWatcher
from gradientmail.patterns.progress import LEASES_PREFIX, ProgressReporter
from gradientmail.patterns.unit_claims import DONE, RELEASED, Held, UnitClaims
from gradientmail.patterns.workers import Backoff, CarriedError, HandoffBuffer

if TYPE_CHECKING:
    from gradientmail.mailbox import Version
    from gradientmail.patterns.shared_queue import QueueStats

__all__ = ["ClaimLoop", "Exhausted", "Failed", "Fenced", "UnitEnd", "UnitStart", "View", "Wake"]


class _LoadFailed(Exception):
    def __init__(self, context: str, original: BaseException) -> None:
        super().__init__(context)
        self.context = context
        self.original = original


_WAIT = object()

#: Lost claims and loader failures at DEBUG; released units taken at INFO; units taken
#: over from a learner declared dead at WARNING.
_log = logging.getLogger(__name__)


class ClaimLoop:
    """The loader thread's work: claim, take over, load into ``buffer``.

    Every unit it holds is registered in ``held`` (shared with the consumer side) before
    its first item is buffered, so the consumer can complete or release it.
    """

    def __init__(
        self,
        *,
        units: Mapping[str, Any],
        view: View,
        claims: UnitClaims,
        lease: Lease,
        load: Callable[[Any], Iterable[Any]],
        buffer: HandoffBuffer[Any],
        held: dict[str, Held],
        held_lock: threading.Condition,
        stats: QueueStats,
        reporter: ProgressReporter | None,
        closing: threading.Event,
        wait_for_others: bool = True,
    ) -> None:
        self.units = units
        self.view = view
        self.claims = claims
        self.lease = lease
        self.load = load
        self.buffer = buffer
        self.held = held
        self.held_lock = held_lock
        self.stats = stats
        self.reporter = reporter
        self.closing = closing
        self.wait_for_others = wait_for_others
        #: ``True`` when the thread ended while other learners still held unfinished units.
        self.others_unfinished = False
        #: owner -> units it held unfinished, as the last scan for takeovers found them.
        self.holders: dict[str, list[str]] = {}
        self.learner = claims.learner_id
        view.paged = view.sorted and lists_from_a_key(claims.mailbox)
        self.watcher = LeaseWatcher(claims.mailbox, LEASES_PREFIX, duration=lease.duration)
        # While waiting for others to finish, poll again after 100 ms, doubling up to one
        # renewal period, and quickly again whenever the idle markers changed (another
        # learner ran out of work): a learner near the end notices it soon, one waiting long
        # costs one small page per period. Each poll lists every marker, so the shortest
        # delay grows with the markers (see wait_step).
        period = lease.duration / RENEWALS_PER_LEASE
        self.period_floor = min(0.1, period)
        self.backoff = Backoff(period, floor=self.period_floor)
        self.done_seen = -1
        self.own: list[tuple[str, ClaimRecord, Version]] = []
        self.idle = IdleWatch(
            claims.mailbox, claims.layout, self.learner, claims.incarnation, self.watcher, period
        )
        self.confirmed_at = -period  # monotonic time of the last listing of done/ that failed
        self.quiet_since: float | None = None  # since when nobody seemed busy
        self.period = period
        self.losses = 0  # claims lost in a row since the last listing
        self.takeovers: list[str] = []  # found takeable by the last scan, not yet taken
        self.held_limit = buffer.capacity + 2
        self.known: dict[str, tuple[ClaimRecord, Version]] = {}  # open claims, read once

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
            _log.debug("loader of %r failed %s: %r", self.learner, context, exc)
            self.buffer.put_control(Failed(CarriedError.of(exc), context))

    def start(self) -> None:
        """One scan: skip done units, note own leftovers from an earlier incarnation."""
        scan = self.claims.scan()
        self.stats.listings += 2
        self.stats.listed_keys += len(scan.claimed) + len(scan.done)
        ids = self.view.position
        self.stats.units_done_before = sum(1 for ident in scan.done if ident in ids)
        self.view.mark(scan.claimed)
        members = self.idle.learners()
        self.stats.listings += 1
        self.view.members = sorted(members | {self.learner})
        self.view.start_at(alone=len(self.view.members) == 1)
        if not self.claims.cas or self.claims.incarnation <= 1:
            return  # no earlier incarnation of this learner: nothing of ours to take back
        self.idle.forget_predecessor()
        mine = [ident for ident in scan.open if ident in ids]
        for ident, (record, version) in self.claims.read_all(mine).items():
            if record.owner == self.learner and UnitClaims.state(record) not in (DONE,):
                self.own.append((ident, record, version))
        self.own.sort(key=lambda entry: ids[entry[0]])

    # -- choosing the next unit ---------------------------------------------------------------

    def next_unit(self) -> Held | None:
        """The next unit to load, or ``None`` when every unit is done or the queue closed."""
        if not self.wait_for_completions():
            return None
        while self.own:
            ident, record, version = self.own.pop(0)
            held = self.claims.take_over(ident, record, version)
            if held is not None:
                return self.hold(held, reclaimed=True)
        held = self.next_takeover()
        if held is not None:
            return held
        view = self.view
        while not self.closing.is_set():
            p = None if self.losses else view.candidate()
            if p is None:
                p = self.jump()  # a wall, or a lost claim: move into a run believed free
            if p is not None:
                identifier = view.identifiers[p]
                began = time.perf_counter()
                held = self.claims.claim(identifier)
                view.taken[p] = 1
                if held is not None:
                    self.stats.claim_latency.add(time.perf_counter() - began)
                    view.claimed(p)
                    self.losses = 0
                    return self.hold(held, reclaimed=False)
                self.stats.conflicts_lost += 1
                _log.debug(
                    "%r lost the claim of unit %r to another learner", self.learner, identifier
                )
                self.losses += 1
                if self.losses >= PROBES_BEFORE_LISTING and not view.paged:
                    self.refresh()  # too stale for probing alone (no partial listings)
                    self.losses = 0
                continue
            # No unit is free: every unit is claimed.
            found = self.wait_step()
            if found is _WAIT:
                self.closing.wait(self.backoff.next())  # a polling period, not a sync
                continue
            if found is None:
                return None
            if isinstance(found, Held):
                return found
        return None

    def jump(self) -> int | None:
        """Where to claim after a wall or a lost claim; ``None`` when every unit is taken."""
        return self._counted(self.view.jump(self.claims.mailbox, self.claims.layout.units))

    def _counted(self, searched: tuple[int | None, int, int]) -> int | None:
        """Count a search of the view's listings in the stats; the position it found."""
        position, listings, keys = searched
        self.stats.listings += listings
        self.stats.listed_keys += keys
        return position

    def _woken(self, position: int | None) -> bool:
        """Whether a search while waiting found a unit; if so this learner is busy again."""
        if position is None:
            return False
        self.idle.unmark()  # it will hold units
        return True

    def wait_step(self) -> object:
        """Nothing is free: end, take a unit over, or say to wait (``_WAIT``).

        Returns what :meth:`reclaim` returns, or ``None`` at the end of the epoch.
        """
        if not self.claims.cas or not self.wait_for_others:
            found = self.reclaim()  # one scan decides (claims are permanent, or no waiting)
            if found is _WAIT and not self.wait_for_others:
                self.others_unfinished = True
                held = ", ".join(f"{o} ({len(u)})" for o, u in sorted(self.holders.items()))
                _log.warning(
                    "%r ends epoch %s with no unit free while other learners hold unfinished "
                    "units: %s; they finish them, or a restart with the same learner id does",
                    self.learner,
                    self.claims.layout.epoch,
                    held or "(owners not read)",
                )
                return None
            return found
        if self.look():
            return True  # a page showed a run still long elsewhere: share it
        with self.held_lock:  # own units first: an idle marker means "holds nothing"
            while self.held and not self.closing.is_set():
                self.held_lock.wait()  # notified by each recorded completion and by close
        if self.closing.is_set():
            return None
        self.idle.mark()
        poll = self.idle.poll()
        self.stats.idle_polls += 1
        # All waiting learners together poll about POLLS_PER_SECOND times a second at
        # most: a poll lists every marker, so at 1,024 learners a fixed 100 ms would list a
        # million keys a second. A learner then notices the end within about
        # markers / POLLS_PER_SECOND seconds (0.5 s at 128 learners, 4 s at 1,024).
        self.backoff.floor = min(
            self.backoff.ceiling, max(self.period_floor, self.idle.markers / POLLS_PER_SECOND)
        )
        if poll.changed:
            self.backoff.reset()
        if poll.absent and self.view.paged and self.sweep_shares(poll.absent):
            return True  # units of an absent learner's share were free: claim them
        if poll.suspects:
            found = self.reclaim()
            self.idle.settle(poll.suspects)
            return found
        if not poll.nobody_busy:
            self.quiet_since = None
            return _WAIT
        now = time.monotonic()
        if self.quiet_since is None:
            self.quiet_since = now
        if self.idle.ended():
            return None  # a learner listed done/ and found every unit done
        if not self.idle.leads() and now - self.quiet_since < self.period:
            return _WAIT  # the leader lists done/; its record ends this learner too
        if not poll.changed and now - self.confirmed_at < self.period:
            return _WAIT  # the last confirmation failed and nothing changed since
        if self.all_done():
            self.idle.record_end(len(self.view.identifiers))
            return None
        self.confirmed_at = now
        return self.reclaim()  # nobody works, yet units are open: look at the claims

    def look(self) -> bool:
        """While resting, one more page of claims; whether it showed a run to share."""
        return self._woken(
            self._counted(self.view.look(self.claims.mailbox, self.claims.layout.units))
        )

    def sweep_shares(self, members: list[str]) -> bool:
        """Sweep the shares of ``members`` (they left); whether a unit there was free."""
        view = self.view
        stretches = sorted({stretch for member in members for stretch in view.share(member)})
        return self._woken(
            self._counted(view.sweep(self.claims.mailbox, self.claims.layout.units, stretches))
        )

    def all_done(self) -> bool:
        """One listing of the completions: whether every unit of the epoch is done."""
        prefix = self.claims.layout.done
        cut = len(prefix)
        position = self.view.position
        listed = done = 0
        for key in self.claims.mailbox.list(prefix):
            listed += 1
            done += key[cut:] in position
        self.stats.listings += 1
        self.stats.listed_keys += listed
        return done == len(position)

    def wait_for_completions(self) -> bool:
        """Claim nothing while more units are held than the buffer plus two can explain.

        Completions are recorded by a background thread; without this bound a fast loader
        and consumer could run far ahead of it, and a learner killed then would leave many
        trained but unrecorded units to be trained again. ``False`` once the queue closes.
        """
        with self.held_lock:
            while len(self.held) > self.held_limit and not self.closing.is_set():
                self.held_lock.wait()  # notified by each recorded completion and by close
        return not self.closing.is_set()

    def refresh(self) -> None:
        """Mark every claimed unit as taken (one paged listing of the claims)."""
        listed = 0
        prefix = self.claims.layout.units
        for key in self.claims.mailbox.list(prefix):
            listed += 1
            p = self.view.position.get(key[len(prefix) :])
            if p is not None:
                self.view.taken[p] = 1
        self.stats.listings += 1
        self.stats.listed_keys += listed

    def reclaim(self) -> object:
        """Nothing is free: take over a released or dead learner's unit, or say to wait.

        Returns a :class:`Held`, ``None`` when every unit is done (or claims are permanent),
        ``_WAIT`` when units are in progress elsewhere, or the sentinel ``True`` when units
        became free again (the view was rebuilt).
        """
        self.lease.ensure_fresh()  # taking over is an owner's act: never while fenced
        scan = self.claims.scan()
        self.stats.wait_scans += 1
        self.stats.listed_keys += len(scan.claimed) + len(scan.done)
        if len(scan.done) != self.done_seen:
            self.done_seen = len(scan.done)
            self.backoff.reset()
        ids = self.view.position
        if any(ident not in scan.claimed for ident in ids):
            self.view.rebuild(scan.claimed)
            return True
        with self.held_lock:
            mine = set(self.held)
        waiting = [ident for ident in scan.open if ident in ids and ident not in mine]
        if not waiting or not self.claims.cas:
            return None
        # Each open claim is read once and remembered: its owner only changes by a takeover
        # or a release, and both show in the owner's lease, which is watched every poll.
        open_now = set(waiting)
        for ident in [i for i in self.known if i not in open_now]:
            del self.known[ident]
        self.known.update(self.claims.read_all(i for i in waiting if i not in self.known))
        by_owner: dict[str, list[str]] = {}
        for ident in waiting:
            if ident not in self.known:
                continue
            record = self.known[ident][0]
            state = UnitClaims.state(record)
            if state == DONE and self.is_earlier_self(record):
                # Our earlier incarnation died between the claim's swap and the record.
                self.claims.finish_done_claim(ident)
                del self.known[ident]
            elif state == RELEASED or self.is_earlier_self(record):
                self.takeovers.append(ident)
            else:
                by_owner.setdefault(record.owner, []).append(ident)
        self.holders = {o: c for o, c in by_owner.items() if o != self.learner}
        for owner, claimed in sorted(by_owner.items()):
            if owner == self.learner:
                continue
            observed = self.watcher.observe(owner)
            if not observed.dead or not self.watcher.declare_lost(owner, self.learner):
                continue  # alive: its units, done claims included, are its own to finish
            for ident in claimed:
                if UnitClaims.state(self.known[ident][0]) == DONE:
                    # It died between swapping the claim to done and writing the record.
                    self.claims.finish_done_claim(ident)
                    del self.known[ident]
                    continue
                self.takeovers.append(ident)
        held = self.next_takeover()
        return _WAIT if held is None else held

    def next_takeover(self) -> Held | None:
        """Take the next unit found takeable (released, or its owner declared lost).

        One scan can find many, so they are taken one after another without scanning again.
        """
        while self.takeovers:
            ident = self.takeovers.pop(0)
            if ident in self.known:
                held = self.take_over(ident)
                if held is not None:
                    return held
        return None

    def take_over(self, ident: str) -> Held | None:
        """Take over a remembered open claim; on a lost swap, forget it and look soon."""
        record, version = self.known.pop(ident)
        self.idle.unmark()  # busy again before the unit is ours
        held = self.claims.take_over(ident, record, version)
        if held is None:
            self.backoff.reset()  # it changed (released, or taken): read it again soon
            return None
        self.stats.units_reclaimed += 1
        if UnitClaims.state(record) == RELEASED:
            _log.info("%r took unit %r, released by %r", self.learner, ident, record.owner)
        elif record.owner != self.learner:
            _log.warning(
                "%r took over unit %r from %r, whose lease lapsed; it is loaded again from "
                "its first item",
                self.learner,
                ident,
                record.owner,
            )
        return self.hold(held, reclaimed=True)

    def is_earlier_self(self, record: ClaimRecord) -> bool:
        incarnation = record.extra.get("incarnation")
        return (
            record.owner == self.learner
            and isinstance(incarnation, int)
            and incarnation < self.claims.incarnation
        )

    def hold(self, held: Held, *, reclaimed: bool) -> Held:
        with self.held_lock:
            self.held[held.identifier] = held
        self.stats.units_claimed += 1
        if self.reporter is not None:
            self.reporter.unit_claimed(held.identifier, reclaimed=reclaimed)
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
            iterator = iter(self.load(self.units[identifier]))
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
