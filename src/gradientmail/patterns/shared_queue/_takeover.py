"""Taking units over: an earlier incarnation's, released ones, and those of the dead.

A scan lists the claims and the completions and reads each open claim once (remembered:
an open claim's owner changes only by a takeover or a release, and both show in the
owner's lease, which is watched). A claim is taken, with compare-and-swap, when it was
released, when it belongs to an earlier incarnation of this learner, or when its owner's
lease was unchanged for a whole duration and this learner declared the owner lost
(exactly one observer does). A claim swapped to ``done`` whose owner died before writing
the ``done/`` record is finished here instead of trained again.

A unit taken is returned, never held here: the loader holds every unit it is handed. The
takeovers tell their siblings what they do: the idle watch that this learner is busy
again before it takes a unit, and the pacing that the claims changed under them.
"""

from __future__ import annotations

import enum
import logging

from gradientmail.mailbox import Version
from gradientmail.patterns._claims import ClaimRecord
from gradientmail.patterns._leases import LeaseWatcher
from gradientmail.patterns.shared_queue._idle_markers import IdleWatch
from gradientmail.patterns.shared_queue._pacing import Pacing
from gradientmail.patterns.shared_queue._scope import Scope
from gradientmail.patterns.shared_queue._unit_claims import DONE, RELEASED, Held, Scan, UnitClaims

__all__ = ["Next", "Takeover"]

#: Released units taken at INFO; units taken over from a learner declared dead at WARNING.
_log = logging.getLogger(__name__)


class Next(enum.Enum):
    """What a learner with no free unit does next, when it takes none over."""

    #: Units are in progress elsewhere: poll again after a pause.
    WAIT = "wait"
    #: Units became free again (the claim policy was rebuilt): claim them.
    FREED = "freed"
    #: Nothing more for this learner: every unit is done, claims are permanent, or closed.
    END = "end"


class Takeover:
    """One learner's takeovers of units claimed by others or by its earlier incarnation.

    Args:
        scope: what the epoch's threads share.
        claims: the epoch's claims, through a door that counts the takeovers' requests
            under their own label (``queue.stats.cost.wait_scans``).
        watcher: the learner's lease watcher, shared with its idle watch (so a holder
            watched there can be declared lost here).
        idle: this learner's idle marker, removed before it takes a unit.
        pacing: told when a claim or the completions changed: look again soon.
    """

    def __init__(
        self,
        scope: Scope,
        claims: UnitClaims,
        watcher: LeaseWatcher,
        idle: IdleWatch,
        pacing: Pacing,
    ) -> None:
        self.scope = scope
        self.claims = claims
        self.watcher = watcher
        self.idle = idle
        self.pacing = pacing
        self.done_seen = -1
        #: owner -> units it held unfinished, as the last scan for takeovers found them.
        self.holders: dict[str, list[str]] = {}
        self.own: list[tuple[str, ClaimRecord, Version]] = []  # an earlier incarnation's
        self.found: list[str] = []  # takeable by the last scan, not yet taken
        self.known: dict[str, tuple[ClaimRecord, Version]] = {}  # open claims, read once

    def note_own(self, scan: Scan) -> None:
        """After a restart: remember the units an earlier incarnation of this learner held."""
        ids = self.scope.policy.position
        mine = [ident for ident in scan.open if ident in ids]
        for ident, (record, version) in self.claims.read_all(mine).items():
            if record.owner == self.claims.learner_id and UnitClaims.state(record) != DONE:
                self.own.append((ident, record, version))
        self.own.sort(key=lambda entry: ids[entry[0]])
        if self.own:
            names = [ident for ident, _, _ in self.own]
            _log.info(
                "%r takes back %d units its earlier incarnation held (%s), before any other",
                self.claims.learner_id,
                len(names),
                ", ".join(names[:5]) + (", ..." if len(names) > 5 else ""),
            )

    def next_own(self) -> Held | None:
        """Take back the next unit of an earlier incarnation, first of all."""
        while self.own:
            ident, record, version = self.own.pop(0)
            held = self.claims.take_over(ident, record, version)
            if held is not None:
                return held
        return None

    def reclaim(self) -> Held | Next:
        """Nothing is free: take over a released or dead learner's unit, or say what next.

        ``Next.END`` when no unit is open elsewhere (or claims are permanent), ``WAIT``
        when units are in progress elsewhere, ``FREED`` when units became free again.
        """
        self.scope.lease.ensure_fresh()  # taking over is an owner's act: never while fenced
        scan = self.claims.scan()
        if len(scan.done) != self.done_seen:
            self.done_seen = len(scan.done)
            self.pacing.changed()
        ids = self.scope.policy.position
        if any(ident not in scan.claimed for ident in ids):
            self.scope.policy.rebuild(scan.claimed)
            return Next.FREED
        mine = self.scope.holdings.identifiers()
        waiting = [ident for ident in scan.open if ident in ids and ident not in mine]
        if not waiting or not self.claims.cas:
            return Next.END
        open_now = set(waiting)
        for ident in [i for i in self.known if i not in open_now]:
            del self.known[ident]
        self.known.update(self.claims.read_all(i for i in waiting if i not in self.known))
        by_owner = self._sort_open(waiting)
        me = self.claims.learner_id
        self.holders = {o: c for o, c in by_owner.items() if o != me}
        for owner, claimed in sorted(self.holders.items()):
            if not self.watcher.declare_if_dead(self.watcher.observe(owner), me):
                continue  # alive: its units, done claims included, are its own to finish
            for ident in claimed:
                if UnitClaims.state(self.known[ident][0]) == DONE:
                    # It died between swapping the claim to done and writing the record.
                    self.claims.finish_done_claim(ident)
                    del self.known[ident]
                    self.pacing.changed()  # a completion more: the epoch may be over now
                    continue
                self.found.append(ident)
        held = self.next_found()
        return Next.WAIT if held is None else held

    def _sort_open(self, waiting: list[str]) -> dict[str, list[str]]:
        """Queue the released and our earlier incarnation's; the rest by owner."""
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
                self.pacing.changed()  # a completion more: the epoch may be over now
            elif state == RELEASED or self.is_earlier_self(record):
                self.found.append(ident)
            else:
                by_owner.setdefault(record.owner, []).append(ident)
        return by_owner

    def next_found(self) -> Held | None:
        """Take the next unit found takeable (released, or its owner declared lost).

        One scan can find many, so they are taken one after another without scanning again.
        """
        while self.found:
            ident = self.found.pop(0)
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
            self.pacing.changed()  # it changed (released, or taken): read it again soon
            return None
        self.scope.stats.units_reclaimed += 1
        me = self.claims.learner_id
        if UnitClaims.state(record) == RELEASED:
            _log.info("%r took unit %r, released by %r", me, ident, record.owner)
        elif record.owner != me:
            _log.warning(
                "%r took over unit %r from %r, whose lease lapsed; it is loaded again from "
                "its first item",
                me,
                ident,
                record.owner,
            )
        return held

    def is_earlier_self(self, record: ClaimRecord) -> bool:
        incarnation = record.extra.get("incarnation")
        return (
            record.owner == self.claims.learner_id
            and isinstance(incarnation, int)
            and incarnation < self.claims.incarnation
        )
