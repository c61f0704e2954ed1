"""How a ``shared_queue`` learner with nothing left to claim waits for the others, cheaply.

Once every unit is claimed, a learner waits until every unit is done, and takes over the
units of learners that die or leave. Waiting must cost little however many learners and
units there are, so a waiting learner does not list the claims while the others are merely
working:

* A learner that holds no unit and finds none free creates ``idle/{learner_id}`` (one per
  epoch). It deletes the marker before it takes a unit over, and a later incarnation
  deletes its predecessor's.
* Each poll lists ``idle/``, and ``leases/`` once per renewal period or when the markers
  name a learner it has not seen (the claim loop's listing of the leases at its start
  counts as the first): one page each for up to 1,000 learners. The waiting
  learners together poll at most about :data:`POLLS_PER_SECOND` times a second. The
  learners with a lease but no marker are *busy* (leases below ``leases/``, such as a
  pipeline's ``leases/producers/``, are not learners). Each busy learner is watched by
  :data:`WATCHERS` of the marked learners: the ones that follow it on a hash ring of the
  ids (consistent hashing), so that every learner knows whom it watches without asking
  anyone, at a cost per poll in proportion to the busy learners, not to busy times idle.
  A watcher reads a watched lease at most once per renewal period.
* A watched learner whose lease says it finished, or that it runs another epoch, holds no
  unit of this epoch: its watcher marks it idle, and sweeps its share of the units (see
  :meth:`~gradientmail.patterns.shared_queue._policy.ClaimPolicy.share`) in case it left
  before sweeping it.
  One whose lease says it released its units, failed or was declared lost, or whose lease
  was not renewed for a whole lease duration, is a *suspect*: the watcher scans the claims
  once (a full listing, and one read per open claim), takes its units over, and then marks
  it idle.
* When no learner is busy, one listing of ``done/`` tells whether every unit is done. One
  learner lists it: the *leader*, the marked learner ranked first by rendezvous hashing of
  the epoch and the ids among those whose lease says they still work in this epoch (a
  marker a watcher wrote for a learner that left does not lead; the learners ranked below
  it read its lease to know). The leader first lists the leases again in case a learner
  started unseen. The learner that marks itself idle last, finding nobody busy, lists
  ``done/`` at once instead of waiting for the leader. When every unit is done it creates
  ``complete``, which ends the epoch for the others: a waiting learner reads it once a
  second (one GET), whatever its polling period. A leader that is slow, or that died
  while idle, is replaced by everyone listing ``done/`` themselves after a renewal period.
  When not every unit is done (a learner was marked while it still worked, or died
  unseen), the learner scans the claims as above, and lists ``done/`` again only after
  the markers change or a renewal period passes.

A learner marked idle while it still works can delay the end, never bring it forward: only
a listing of ``done/`` that shows every unit ends the epoch.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from gradientmail._errors import KeyNotFoundError
from gradientmail._record_codec import encode_record
from gradientmail.patterns._claims import create_settled
from gradientmail.patterns._hash_ring import Ring, rank
from gradientmail.patterns._leases import LeaseState, LeaseWatcher
from gradientmail.patterns._run_layout import LEASES_PREFIX
from gradientmail.patterns.shared_queue._unit_claims import UnitClaims

__all__ = ["POLLS_PER_SECOND", "WATCHERS", "IdleWatch", "Poll"]

#: How many idle learners watch each busy one.
WATCHERS = 2
#: About how many polls all waiting learners together make per second, at most.
POLLS_PER_SECOND = 250


@dataclass
class Poll:
    """What one poll found."""

    #: No learner is busy: a listing of ``done/`` may end the epoch.
    nobody_busy: bool
    #: Watched learners that may hold units nobody works on.
    suspects: list[str] = field(default_factory=list)
    #: The set of marked learners differs from the previous poll's.
    changed: bool = False
    #: Learners this poll marked idle on their behalf (finished, or in another epoch):
    #: their share of the end-of-epoch sweep is left to their watchers.
    absent: list[str] = field(default_factory=list)


class IdleWatch:
    """One learner's side of the idle markers of one epoch.

    Args:
        claims: this learner's claims of the epoch: the mailbox, the epoch's keys, the
            learner id and its lease incarnation.
        watcher: the learner's lease watcher (shared with its claim scans, so a holder
            watched here can be declared lost there); its clock times this watch too.
        period: the lease renewal period: the most often one lease is read.
    """

    def __init__(self, claims: UnitClaims, watcher: LeaseWatcher, period: float) -> None:
        self.claims = claims
        self.watcher = watcher
        self.period = period
        self.marked = False
        self._observed: dict[str, tuple[float, LeaseState]] = {}
        self._idle: frozenset[str] = frozenset()
        #: The learners with a lease at the last listing, and when (monotonic) it was.
        self._leased: tuple[set[str], float | None] = (set(), None)
        #: The ring of the idle learners last seen, and the learners it was built from.
        self._ring: tuple[tuple[str, ...], Ring] = ((), Ring(()))
        self._lead_ranks: dict[str, bytes] = {}

    @property
    def prefix(self) -> str:
        """Where this epoch's idle markers are."""
        return self.claims.layout.idle

    @property
    def markers(self) -> int:
        """How many idle markers the last poll listed."""
        return len(self._idle)

    # -- this learner's marker ----------------------------------------------------------------

    def mark(self) -> bool:
        """Say that this learner holds no unit and finds none free; whether it was busy."""
        if self.marked:
            return False
        self._mark_for(self.claims.learner_id, "idle")
        self.marked = True
        return True

    def unmark(self) -> None:
        """Before taking a unit over: this learner is busy again."""
        if self.marked:
            self.claims.mailbox.delete(self.prefix + self.claims.learner_id)
            self.marked = False

    def forget_predecessor(self) -> None:
        """Delete a marker an earlier incarnation of this learner left (it may hold units)."""
        self.claims.mailbox.delete(self.prefix + self.claims.learner_id)
        self.marked = False

    def _mark_for(self, holder: str, why: str) -> None:
        record = {"by": self.claims.learner_id, "incarnation": self.claims.incarnation, "why": why}
        record["at"] = time.time()
        create_settled(self.claims.mailbox, self.prefix + holder, encode_record(record))

    # -- polling ------------------------------------------------------------------------------

    def poll(self, *, relist: bool = False) -> Poll:
        """List the markers (and the leases, see :meth:`_learners`); read watched leases."""
        idle = frozenset(self._names(self.prefix))
        fresh = relist or self._leases_stale(idle)
        leased = self.learners() if fresh else self._leased[0]
        changed = idle != self._idle
        self._idle = idle
        busy = sorted(leased - idle - {self.claims.learner_id})
        watchers = sorted(idle | {self.claims.learner_id})
        suspects: list[str] = []
        absent: list[str] = []
        still_busy = 0
        for holder in busy:
            if not self._watches(holder, watchers):
                still_busy += 1
                continue
            state = self._observe(holder)
            if self._works_here(state):
                still_busy += 1
            elif state.state == "finished" or (state.state == "running" and not state.dead):
                # Finished (holds nothing), or alive in another epoch: nothing of this one.
                self._mark_for(holder, f"{state.state} in epoch {state.epoch}")
                absent.append(holder)
            else:
                suspects.append(holder)
                still_busy += 1
        if still_busy == 0 and not fresh and self.leads():
            # Nobody busy, and this learner is the one to list done/: make sure of the
            # learners first (the others wait for its record, see leads()).
            again = self.poll(relist=True)
            again.changed = again.changed or changed
            again.absent = absent + again.absent
            return again
        return Poll(nobody_busy=still_busy == 0, suspects=suspects, changed=changed, absent=absent)

    def learners(self) -> set[str]:
        """List the learners with a lease (the claim loop asks when it starts); the listing
        also serves this watch's first poll, which then does not list them again."""
        names = self._names(LEASES_PREFIX)
        self._leased = (names, self.watcher.clock())
        return names

    def _leases_stale(self, idle: frozenset[str]) -> bool:
        """Whether to list the leases again: learners rarely come and go, so only once per
        renewal period, or when a marker names a learner not seen yet."""
        names, at = self._leased
        if at is None or self.watcher.clock() - at >= self.period:
            return True
        return not idle <= names | {self.claims.learner_id}

    def settle(self, suspects: list[str]) -> None:
        """After a scan took the suspects' units over: mark those that are really gone."""
        for holder in suspects:
            state = self._observe(holder, fresh=True)
            gone = state.dead and (
                state.state != "running"
                or self.watcher.declare_lost(holder, self.claims.learner_id)
            )
            if gone:
                self._mark_for(holder, state.state)

    # -- the end -------------------------------------------------------------------------------

    def leads(self) -> bool:
        """Whether this learner is the one that lists ``done/`` when nobody is busy.

        The leader is the idle learner of highest rank that still works in this epoch. A
        marker a watcher wrote for a learner that left (released, finished, lost, or in
        another epoch) does not lead: a learner reads the leases of the markers ranked
        above it (cached for a renewal period, stopping at the first that works here), so
        the learners agree on a live leader instead of waiting a period for one that is gone.
        """
        mine = self._lead_rank(self.claims.learner_id)
        return not any(
            self._works_here(self._observe(other))
            for other in self._idle
            if self._lead_rank(other) > mine
        )

    def _lead_rank(self, name: str) -> bytes:
        known = self._lead_ranks.get(name)
        if known is None:
            known = self._lead_ranks[name] = rank(f"end of epoch {self.claims.layout.epoch}", name)
        return known

    def ended(self) -> bool:
        """Whether a learner found every unit of the epoch done (one read)."""
        try:
            self.claims.mailbox.get(self.claims.layout.complete)
        except KeyNotFoundError:
            return False
        return True

    def record_end(self, units: int) -> None:
        """After a listing of ``done/`` showed every unit: end the epoch for the others."""
        record = {"by": self.claims.learner_id, "units": units, "at": time.time()}
        self.claims.mailbox.put_if_absent(self.claims.layout.complete, encode_record(record))

    def _works_here(self, state: LeaseState) -> bool:
        return (
            state.state == "running" and not state.dead and state.works_in(self.claims.layout.epoch)
        )

    def _watches(self, holder: str, watchers: list[str]) -> bool:
        """Whether this learner is one of the :data:`WATCHERS` chosen for ``holder``."""
        if len(watchers) <= WATCHERS:
            return True
        key = tuple(watchers)
        if key != self._ring[0]:  # rebuilt only when the idle learners change
            self._ring = (key, Ring(key))
        return self.claims.learner_id in self._ring[1].successors(holder, WATCHERS)

    def _observe(self, holder: str, *, fresh: bool = False) -> LeaseState:
        now = self.watcher.clock()
        seen = self._observed.get(holder)
        if seen is not None and not fresh and now - seen[0] < self.period:
            return seen[1]
        state = self.watcher.observe(holder)
        self._observed[holder] = (now, state)
        return state

    def _names(self, prefix: str) -> set[str]:
        # Learner ids are one segment; leases below one (a pipeline's) are not learners.
        cut = len(prefix)
        return {key[cut:] for key in self.claims.mailbox.list(prefix) if "/" not in key[cut:]}
