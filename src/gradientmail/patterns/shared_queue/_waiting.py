"""A learner with no free unit: wait for the others, take units over, end the epoch.

The one owner of what waiting decides: when to mark this learner idle and poll the
others (:mod:`~gradientmail.patterns.shared_queue._idle_markers`), when to scan the claims
for takeovers (:mod:`~gradientmail.patterns.shared_queue._takeover`), and when the epoch is
over (the leader's listing of ``done/``). Each :meth:`Waiting.step` does one of them and
says what the loader does next: claim again, hold a unit taken over, pause, or end. How
long it pauses between steps is its sibling's, :mod:`~gradientmail.patterns.shared_queue._pacing`.

The learner that goes idle last, finding nobody busy, lists ``done/`` at once and writes
``complete``; the others notice that record within about a second.
"""

from __future__ import annotations

import logging
import time

from gradientmail.patterns.shared_queue._idle_markers import IdleWatch
from gradientmail.patterns.shared_queue._pacing import NOTICE_S, Pacing
from gradientmail.patterns.shared_queue._scope import Scope
from gradientmail.patterns.shared_queue._takeover import Next, Takeover
from gradientmail.patterns.shared_queue._unit_claims import Held

__all__ = ["NOTICE_S", "Next", "Waiting"]

_log = logging.getLogger(__name__)


class Waiting:
    """Waiting for the others, for one learner's loader thread.

    Args:
        scope: what the epoch's threads share.
        idle: this learner's idle marker and its watch of the others.
        takeover: this learner's takeovers, which scan the claims.
        pacing: when the next full poll is due.
        wait_for_others: ``False``: one scan decides, as without compare-and-swap.

    Guarantees: the epoch ends only on a listing of ``done/`` that shows every unit (this
    learner's, or the leader's ``complete`` record); a learner marks itself idle only once
    every unit it holds is recorded; with ``wait_for_others=False``, or without
    compare-and-swap, one scan decides. A unit taken over is returned, not held: the
    loader holds it.
    """

    def __init__(
        self,
        scope: Scope,
        idle: IdleWatch,
        takeover: Takeover,
        pacing: Pacing,
        *,
        wait_for_others: bool,
        siblings: frozenset[str] = frozenset(),
    ) -> None:
        self.scope = scope
        self.idle = idle
        self.takeover = takeover
        self.pacing = pacing
        self.wait_for_others = wait_for_others
        #: Learners loading for the same consumer (its rank's other DataLoader workers).
        self.siblings = siblings
        #: ``True`` when the loader ended while other learners still held unfinished units.
        self.others_unfinished = False

    def pause(self) -> None:
        """Wait until the next full poll is due, or a second (or the queue closes)."""
        self.pacing.pause()

    def step(self) -> Held | Next:
        """Nothing is free: end, take a unit over, claim again (``FREED``), or ``WAIT``."""
        if not self.scope.claims.cas or not self.wait_for_others:
            return self._decide_once()
        if not self.pacing.poll_due():
            # Between full polls: one read of the record that ends the epoch.
            return Next.END if self.idle.ended() else Next.WAIT
        found = self._poll()
        if found is not Next.WAIT:
            self.pacing.poll_at_once()  # busy again, or done: the next wait polls at once
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
        self.pacing.polled(idle.markers, poll.changed)
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
        quiet = self.pacing.quiet
        if not nobody_busy:
            quiet.since = None
            return Next.WAIT
        now = time.monotonic()
        if quiet.since is None:
            quiet.since = now
        period = self.pacing.backoff.ceiling
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
            others = [(owner, units) for owner, units in holders if owner not in self.siblings]
            if holders and not others:
                return Next.END  # only this consumer's other workers hold units: they finish
            held = ", ".join(f"{owner} ({len(units)})" for owner, units in others)
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
        done = sum(1 for key in scope.claims.mailbox.list(prefix) if key[cut:] in position)
        return done == len(position)
