"""A learner with no free unit: wait for the others, take units over, end the epoch.

The one owner of what waiting means: the idle markers and the watchers
(:mod:`~gradientmail.patterns.shared_queue._idle_markers`), the poll pacing, the leader's
listing of ``done/`` and the end of the epoch. Each :meth:`Waiting.step` does one of
them and says what the loader does next: claim again, hold a unit taken over, pause,
or end.

A waiting learner does the expensive part (a page of claims, the idle markers, the watched
leases) on a backoff that doubles up to one renewal period, but between two of those it
reads the epoch's one ``complete`` record every :data:`NOTICE_S` seconds (one GET), so it
notices the end within about a second and a round trip whatever the lease. The learner that
goes idle last, finding nobody busy, lists ``done/`` at once and writes ``complete``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from gradientmail.patterns._leases import LeaseWatcher
from gradientmail.patterns._run_layout import LEASES_PREFIX
from gradientmail.patterns._workers import Backoff
from gradientmail.patterns.shared_queue._idle_markers import POLLS_PER_SECOND, IdleWatch
from gradientmail.patterns.shared_queue._scope import Scope
from gradientmail.patterns.shared_queue._takeover import Hooks, Next, Takeover
from gradientmail.patterns.shared_queue._unit_claims import Held, Scan

__all__ = ["NOTICE_S", "Next", "Waiting"]

_log = logging.getLogger(__name__)

#: The longest a waiting learner goes without reading the epoch's ``complete`` record.
NOTICE_S = 1.0


@dataclass
class _Quiet:
    """The end-of-epoch clocks (monotonic seconds)."""

    #: Since when nobody seemed busy; ``None`` while someone is.
    since: float | None = None
    #: When a listing of ``done/`` last failed to show every unit.
    confirmed_at: float = float("-inf")


class Waiting:
    """Waiting for the others, for one learner's loader thread.

    Guarantees: the epoch ends only on a listing of ``done/`` that shows every unit (this
    learner's, or the leader's ``complete`` record); a learner marks itself idle only once
    every unit it holds is recorded; with ``wait_for_others=False``, or without
    compare-and-swap, one scan decides.
    """

    def __init__(
        self, scope: Scope, *, wait_for_others: bool, hold: Callable[[Held, bool], Held]
    ) -> None:
        self.scope = scope
        self.wait_for_others = wait_for_others
        #: ``True`` when the loader ended while other learners still held unfinished units.
        self.others_unfinished = False
        # While waiting, poll again after 100 ms, doubling up to one renewal period, and
        # soon again whenever the idle markers changed (another learner ran out of work): a
        # learner near the end notices it soon, one waiting long costs a small page per
        # period. Each poll lists every marker, so the shortest delay grows with them.
        period = scope.lease.period
        self.backoff = Backoff(period, floor=min(0.1, period))
        self.quiet = _Quiet(confirmed_at=-period)
        #: When (monotonic) the next full poll is due; until then a step reads ``complete``.
        self._poll_at = float("-inf")
        claims = scope.claims
        watcher = LeaseWatcher(claims.mailbox, LEASES_PREFIX, duration=scope.lease.duration)
        self.idle = IdleWatch(claims, watcher, period)
        hooks = Hooks(busy=self.idle.unmark, changed=self._changed, hold=hold)
        self.takeover = Takeover(scope, watcher, hooks)

    def begin(self, scan: Scan) -> None:
        """At the start: learn the members, place the walk, note an earlier self's units."""
        members = self.idle.learners()
        scope = self.scope
        scope.stats.cost.listings += 1
        scope.policy.begin(scan.claimed, members)
        if not scope.claims.cas or scope.claims.incarnation <= 1:
            return  # no earlier incarnation of this learner: nothing of ours to take back
        self.idle.forget_predecessor()
        self.takeover.note_own(scan)

    def _changed(self) -> None:
        """Claims or completions changed: poll soon, and confirm the end again at once."""
        self.backoff.reset()
        self.quiet.confirmed_at = float("-inf")

    def pause(self) -> None:
        """Wait until the next full poll is due, or :data:`NOTICE_S` (or the queue closes)."""
        now = time.monotonic()
        if now >= self._poll_at:
            self._poll_at = now + self.backoff.next()
        self.scope.closing.wait(min(NOTICE_S, self._poll_at - now))  # a polling period, not a sync

    def step(self) -> Held | Next:
        """Nothing is free: end, take a unit over, claim again (``FREED``), or ``WAIT``."""
        if not self.scope.claims.cas or not self.wait_for_others:
            return self._decide_once()
        if time.monotonic() < self._poll_at:
            # Between full polls: one read of the record that ends the epoch.
            return Next.END if self.idle.ended() else Next.WAIT
        found = self._poll()
        if found is not Next.WAIT:
            self._poll_at = float("-inf")  # busy again, or done: the next wait polls at once
        return found

    def _poll(self) -> Held | Next:
        """One full poll: a page of claims, the idle markers and the watched leases."""
        if self.look():
            return Next.FREED  # a page showed a run still long elsewhere: share it
        # Own units first: an idle marker means "holds nothing".
        if not self.scope.holdings.wait_at_most(0) or self.scope.closing.is_set():
            return Next.END
        idle = self.idle
        newly = idle.mark()
        poll = idle.poll()
        self.scope.stats.cost.idle_polls += 1
        # All waiting learners together poll about POLLS_PER_SECOND times a second at
        # most: a poll lists every marker, so at 1,024 learners a fixed 100 ms would list a
        # million keys a second. A learner then notices the end within about
        # markers / POLLS_PER_SECOND seconds (0.5 s at 128 learners, 4 s at 1,024).
        backoff = self.backoff
        floor = min(0.1, backoff.ceiling)
        backoff.floor = min(backoff.ceiling, max(floor, idle.markers / POLLS_PER_SECOND))
        if poll.changed:
            backoff.reset()
        if poll.absent and self._woken(self.scope.policy.sweep(poll.absent)):
            return Next.FREED  # units of an absent learner's share were free: claim them
        if poll.suspects:
            found = self.takeover.reclaim()
            idle.settle(poll.suspects)
            return found
        return self._at_rest(poll.nobody_busy, poll.changed, last=newly)

    def _at_rest(self, nobody_busy: bool, changed: bool, *, last: bool) -> Held | Next:
        """No suspect: wait, or, when nobody is busy, decide whether the epoch is over.

        ``last``: this learner has just marked itself idle and found nobody busy, so it was
        the last to finish: it lists ``done/`` at once rather than leave it to the leader.
        """
        quiet = self.quiet
        if not nobody_busy:
            quiet.since = None
            return Next.WAIT
        now = time.monotonic()
        if quiet.since is None:
            quiet.since = now
        period = self.backoff.ceiling
        if self.idle.ended():
            return Next.END  # a learner listed done/ and found every unit done
        if not last:
            if not self.idle.leads() and now - quiet.since < period:
                return Next.WAIT  # the leader lists done/; its record ends this learner too
            if not changed and now - quiet.confirmed_at < period:
                return Next.WAIT  # the last confirmation failed and nothing changed since
        if self.all_done():
            self.idle.record_end(len(self.scope.policy.identifiers))
            return Next.END
        quiet.confirmed_at = now
        return self.takeover.reclaim()  # nobody works, yet units are open: read the claims

    def _decide_once(self) -> Held | Next:
        """Claims are permanent, or this learner does not wait: one scan decides."""
        found = self.takeover.reclaim()
        if found is Next.WAIT and not self.wait_for_others:
            self.others_unfinished = True
            holders = sorted(self.takeover.holders.items())
            held = ", ".join(f"{owner} ({len(units)})" for owner, units in holders)
            _log.warning(
                "%r ends epoch %s with no unit free while other learners hold unfinished "
                "units: %s; they finish them, or a restart with the same learner id does",
                self.scope.claims.learner_id,
                self.scope.claims.layout.epoch,
                held or "(owners not read)",
            )
            return Next.END
        return found

    def look(self) -> bool:
        """While resting, one more page of claims; whether it showed a run to share."""
        return self._woken(self.scope.policy.look())

    def _woken(self, position: int | None) -> bool:
        """Whether a search while waiting found a unit; if so this learner is busy again."""
        if position is None:
            return False
        self.idle.unmark()  # it will hold units
        return True

    def all_done(self) -> bool:
        """One listing of the completions: whether every unit of the epoch is done."""
        scope = self.scope
        prefix = scope.claims.layout.done
        cut = len(prefix)
        position = scope.policy.position
        listed = done = 0
        for key in scope.claims.mailbox.list(prefix):
            listed += 1
            done += key[cut:] in position
        scope.stats.cost.listings += 1
        scope.stats.cost.listed_keys += listed
        return done == len(position)
