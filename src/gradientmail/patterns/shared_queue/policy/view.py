"""What a ``shared_queue`` learner believes is taken, and where it claims next.

A learner walks its preference order and keeps to its own stretch of it; after a lost
claim or a wall it jumps into a run it believes free; near the end it sweeps its share of
the order and then rests, looking one page further each time it waits. The view decides
positions only: it marks what is taken (marks are only ever added, so "taken" is never
wrong) and lists pages of claims through the mailbox it is handed. ``docs/shared-queue.md``
("How a learner chooses its next unit") describes the walk, the jumps, the sweeps and the
rest in full, with the benchmarks behind them.
"""

from __future__ import annotations

import inspect

from gradientmail.mailbox import Capability, Mailbox, SupportsListStartAfter
from gradientmail.patterns.hash_ring import Ring, point, seed_of
from gradientmail.patterns.shared_queue.policy.free_runs import PAGE, FreeRuns

__all__ = [
    "DRY_PAGES",
    "PAGE",
    "PROBES_BEFORE_LISTING",
    "SHORT_RUN",
    "SWEEPERS",
    "View",
    "lists_from_a_key",
]

#: Claims lost in a row before a view without partial listings is refreshed by a full
#: listing; until then a learner that loses jumps elsewhere, which costs one create.
PROBES_BEFORE_LISTING = 4
#: Runs shorter than this are left to the learner walking into them; a jump enters longer
#: ones in their middle half.
SHORT_RUN = 4
#: Pages in a row that showed no run worth taking (:data:`SHORT_RUN` free units or more)
#: before a learner stops searching the whole order: the end of the epoch is near, and
#: what is still free is either in front of the
#: learner that claimed the unit before it, or in some learner's share (see
#: :meth:`View.share`).
DRY_PAGES = 10
#: How many learners sweep each stretch of :data:`PAGE` units at the end of an epoch.
SWEEPERS = 2


def lists_from_a_key(mailbox: Mailbox) -> bool:
    """Whether ``mailbox`` declares partial listings and its ``list`` takes ``start_after``.

    A wrapper may forward an inner mailbox's capabilities while its own ``list`` predates
    partial listings; such a mailbox is treated as one without them.
    """
    if not mailbox.supports(Capability.LIST_START_AFTER):
        return False
    try:
        parameters = inspect.signature(mailbox.list).parameters
    except (TypeError, ValueError):
        return False
    return "start_after" in parameters or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()
    )


class View(FreeRuns):
    """Which units this learner believes are taken, by position in its preference order.

    Args:
        identifiers: the preference order.
        learner_id: seeds this learner's jump points.
        shared_order: every learner has this order (no ``order=``), so learners that start
            together should start apart; with an ``order=`` of its own a learner starts at
            its first preference.
    """

    def __init__(self, identifiers: list[str], learner_id: str, shared_order: bool = True) -> None:
        super().__init__(identifiers, seed_of(learner_id))
        self.shared_order = shared_order
        #: Jumps list a page first (set by the claim loop; see :func:`lists_from_a_key`).
        self.paged = False
        #: The last position of a page whose free runs this learner takes one after another
        #: (a sweep's page, or the freshest page of short runs; a page for each run would
        #: cost a request each), ``-1`` when none.
        self.sparse_until = -1
        #: Walking the current run from its last unit (:attr:`run_end`) towards its first,
        #: where whoever walks it from the front meets this learner.
        self.backward = False
        self.run_end = -1
        self.next = 0
        self.jumps = 0
        #: The learners with a lease when this one started, itself included (set by the
        #: claim loop): they split the end-of-epoch sweep (see :meth:`share`).
        self.members: list[str] = [learner_id]
        #: Where the other members start (see :meth:`start_at`): a walk stops there.
        self.stops: set[int] = set()
        self.learner_id = learner_id
        #: Pages in a row that showed no run worth taking.
        self.dry = 0
        #: The search is over: the last pages were dry and this learner's share is taken.
        #: Jumps list nothing until :meth:`rebuild` (a scan found free units again).
        self.resting = False
        #: While resting: where the next look lists from, and the pages looked at since the
        #: rest began (see :meth:`look`).
        self.look_from = 0
        self.looked = 0

    def rebuild(self, claimed: set[str]) -> None:
        """Make the view exactly ``claimed`` (units released by deletion become free)."""
        self.taken = bytearray(len(self.identifiers))
        self.mark(claimed)
        self.resting = False
        self.dry = 0
        self.backward = False

    def claimed(self, position: int) -> None:
        """This learner won the claim of ``position``: walk on from it."""
        self.next = position - 1 if self.backward else position + 1

    def candidate(self) -> int | None:
        """The next position to claim, or ``None`` to jump.

        With partial listings, the one after the last claim if believed free: a wall means
        another learner's stretch, and a jump costs only a page. Where another member starts
        (see :meth:`start_at`) is a wall too, the first time the walk reaches it. Without,
        the next position
        believed free, walking past walls the view knows of (a jump is blind).
        """
        p = self.next
        if self.paged:
            if self.backward:
                if p >= 0 and not self.taken[p]:
                    return p
                # Met a unit known taken: the run is done; on to the next the page showed.
                return self._sparse_next(p)
            if p in self.stops:
                self.stops.discard(p)
                return None  # another member's start: it claimed this unit first
            if p < len(self.taken) and not self.taken[p]:
                return p
            return None
        p = self.taken.find(0, p)
        return p if p >= 0 else None

    def _sparse_next(self, p: int) -> int | None:
        """After a backward walk ended at ``p``: the next unit of the sparse page to claim.

        The last unit of the next free run after the one just walked; ``None`` when the page
        has none left (then it is forgotten).
        """
        until = self.sparse_until
        if self.run_end < until:
            q = self.taken.find(0, self.run_end + 1, until + 1)
            if q >= 0:
                return self._from_end(q, until)
        self.backward = False
        self.sparse_until = -1
        return None

    def _from_end(self, q: int, limit: int) -> int:
        """Walk the free run at ``q`` backward from its last unit (at most ``limit``)."""
        end = self.taken.find(1, q, limit + 1)
        return self._back_from(limit if end < 0 else end - 1)

    def _back_from(self, p: int) -> int:
        """Walk backward from ``p``; after it, the sparse page's runs after ``p``."""
        self.backward = True
        self.run_end = self.next = p
        return p

    def _forward_from(self, p: int) -> int:
        """Walk forward from ``p``."""
        self.backward = False
        self.next = p
        return p

    def start_at(self, alone: bool) -> None:
        """Choose the first position: the first unit for a learner alone, else a point
        drawn from the learner id, so learners that start together start apart.

        Only where jumps list pages: a blind learner that starts apart runs into the others'
        stretches unseen, each a lost claim, and 8 learners over 2000 units lost about a
        quarter more claims than when all start at the first unit and spread on losing.

        A learner that starts apart also knows where each of :attr:`members` starts: its
        walk stops short of those points (see :meth:`candidate`) instead of losing a claim
        on the first unit of the next member's stretch.
        """
        if not alone and self.shared_order and self.paged and self.identifiers:
            self.next = self.start_of(self.learner_id)
            self.jumps = 1  # the start was the spreading jump
            self.stops = {self.start_of(m) for m in self.members} - {self.next}

    def start_of(self, learner_id: str) -> int:
        """Where the learner ``learner_id`` starts when it starts apart: its point on the
        hash ring, scaled to the order, the same on every learner."""
        return point(learner_id) * len(self.identifiers) >> 64

    def jump(self, mailbox: Mailbox, prefix: str) -> tuple[int | None, int, int]:
        """Move into a run believed free; see the module docstring.

        Returns:
            ``(position, listings, keys listed)``: the position to claim next (``None``
            when no unit is believed free), the partial listings taken and the keys they
            returned.
        """
        listings = keys = 0
        if not self.paged:
            run = self.largest_run()
        elif self.resting:
            return None, 0, 0
        else:
            run, listings, keys = self._verified_run(mailbox, prefix)
            if run is None and not self.exhausted():
                # The last pages were dry: sweep this learner's share, then rest.
                found, swept, listed = self.sweep(mailbox, prefix, self.share())
                self.resting = found is None
                if self.resting:
                    # Looks while resting start apart (see look).
                    self.look_from = int(len(self.identifiers) * self.rng.random())
                    self.looked = 0
                return found, listings + swept, keys + listed
        if run is None:
            return None, listings, keys
        start, length = run
        if not self.paged:
            # Blind: the middle half of the largest run (a stale view believes most units
            # free, so a point far from both ends is the likeliest to be free).
            offset = int(length * self.rng.uniform(0.25, 0.75)) if length > 2 else 0
        elif length < SHORT_RUN:
            # Only short runs are left: walk one from its last unit back towards the learner
            # walking into it from its start, then the page's other short runs alike.
            self.jumps += 1
            return self._from_end(start, start + length - 1), listings, keys
        elif self.jumps == 0:
            offset = int(length * self.rng.random())
        else:
            # The middle half: the learner walking into the run from its start and this one
            # split it, and meet only when both have walked a quarter of it.
            offset = int(length * self.rng.uniform(0.25, 0.75))
        self.jumps += 1
        return self._forward_from(start + offset), listings, keys

    def _verified_run(
        self, mailbox: Mailbox, prefix: str
    ) -> tuple[tuple[int, int] | None, int, int]:
        """A run of :data:`SHORT_RUN` units or more that a page listed a moment ago showed
        free; else, if the pages went round the whole order, a shorter one from the freshest
        page that showed one; else ``None`` (after :data:`DRY_PAGES` pages that showed no
        run worth taking, or none free).
        """
        assert isinstance(mailbox, SupportsListStartAfter)
        listings = keys = 0
        run = self.pick_run(shortest=SHORT_RUN) or self.pick_run()
        # Each page marks what it shows taken, so a stale view converges. A page costs one
        # request, as a lost claim does, and shows up to a thousand claims where a lost
        # claim shows one. The first page starts at a run drawn at random (learners that
        # jump together spread); each further one starts at the next run believed free
        # after what the pages so far covered, so pages in a row tile the order and never
        # list a stretch twice.
        # Positions in the order of the pages so far, counted on from the first page's start
        # (each wrap to the front counts ``len(order)`` more).
        origin, offset, n = (run[0] if run else 0), 0, len(self.identifiers)
        short: tuple[int, int] | None = None
        short_last = -1
        while run is not None:
            # List the claims from the run's start, then choose in the stretch the page
            # covered: what it shows free was free a moment ago.
            last, listed = self.list_page(mailbox, prefix, run[0])
            listings += 1
            keys += listed
            found = self.pick_run(within=(run[0], last), shortest=SHORT_RUN)
            if found is not None:
                self.sparse_until = -1
                self.dry = 0
                return found, listings, keys
            seen = self.pick_run(within=(run[0], last))
            if seen is not None:
                short, short_last = seen, last  # the freshest page that showed one
            self.dry += 1
            if self.dry >= DRY_PAGES:
                return None, listings, keys  # the end is near: sweep the share, then rest
            run = self.run_after(last, shortest=SHORT_RUN) or self.run_after(last)
            if run is not None and run[0] <= last:
                offset += n  # wrapped to the front
            if run is not None and offset + run[0] >= origin + n:
                break  # the pages (and the claims known between them) went round the order
        if short is not None:
            # The pages went round the whole order and nothing longer is free: the short
            # runs of the freshest page that showed one, each from its last unit.
            self.sparse_until = short_last
            self.dry = 0
        return short, listings, keys

    def look(self, mailbox: Mailbox, prefix: str) -> tuple[int | None, int, int]:
        """While resting: list one page further on; end the rest at a run worth sharing.

        A learner rests after dry pages in one part of the order, while runs may still be
        long elsewhere, in front of slow learners. So each time it waits it lists one more
        page, going on from a point drawn from its seed, and at most one listing of the
        order in all (until :meth:`rebuild`): many resting learners together cover the order
        within a wait or two. A page that shows a run of :data:`SHORT_RUN` units or more
        free ends the rest, and the learner moves into the run's middle half, splitting it
        with the learner walking it; shorter runs are left to that learner.

        Returns:
            ``(position, listings, keys listed)``; ``position`` is ``None`` while it rests.
        """
        if not (self.paged and self.resting) or self.looked > self.pages:
            return None, 0, 0
        assert isinstance(mailbox, SupportsListStartAfter)
        run = self.run_after(self.look_from - 1)  # the first position believed free on
        if run is None:
            return None, 0, 0  # every unit is taken
        last, listed = self.list_page(mailbox, prefix, run[0])
        self.looked += 1
        self.look_from = last + 1 if last + 1 < len(self.taken) else 0
        found = self.pick_run(within=(run[0], last), shortest=SHORT_RUN)
        if found is None:
            return None, 1, listed
        start, length = found
        self.resting = False
        self.dry = 0
        self.sparse_until = -1
        self.jumps += 1
        return self._forward_from(start + int(length * self.rng.uniform(0.25, 0.75))), 1, listed

    def share(self, member: str | None = None) -> list[int]:
        """The stretches of :data:`PAGE` units that ``member`` (default: this learner)
        sweeps at the end of the epoch, by number.

        Each stretch is swept by the :data:`SWEEPERS` members that follow it on a hash
        ring of :attr:`members`. A learner that knows fewer members than another sweeps
        more, never less: the first member after a stretch among all of them is also the
        first among those it knows itself. So every stretch is swept by a live learner
        unless its sweepers died or left, which the watchers of waiting learners notice
        (see :mod:`gradientmail.patterns.shared_queue.idle_markers`).
        """
        me = self.learner_id if member is None else member
        ring = Ring([*self.members, me])
        return [s for s in range(self.pages) if me in self._sweepers(ring, s)]

    @staticmethod
    def _sweepers(ring: Ring, stretch: int) -> list[str]:
        """The members that sweep ``stretch``, first sweeper first."""
        return ring.successors(f"stretch {stretch}", SWEEPERS)

    def sweep(
        self, mailbox: Mailbox, prefix: str, stretches: list[int]
    ) -> tuple[int | None, int, int]:
        """List the stretches' claims; move into the free runs they show, if any.

        Each run is walked backward from its last unit: a live learner may be walking it
        from its front (they meet where their paces put them), or nobody (its learner died,
        or an earlier run left it), and then this learner takes it whole. The second
        sweeper of a stretch starts at its middle free unit instead, so that the two do not
        claim the same units.

        Returns:
            ``(position, listings, keys listed)``; ``position`` is ``None`` when every
            unit of the stretches is taken.
        """
        assert isinstance(mailbox, SupportsListStartAfter)
        listings = keys = 0
        for stretch in stretches:
            first, end = stretch * PAGE, min((stretch + 1) * PAGE, len(self.taken))
            p = self.taken.find(0, first, end)
            while p >= 0:
                last, listed = self.list_page(mailbox, prefix, p)
                listings += 1
                keys += listed
                until = min(last, end - 1)
                q = self.taken.find(0, p, until + 1)
                if q >= 0:
                    self.dry = 0
                    self.resting = False
                    self.sparse_until = until
                    ring = Ring([*self.members, self.learner_id])
                    if self.learner_id in self._sweepers(ring, stretch)[1:]:
                        # The second sweeper: from the middle free unit of the stretch, so
                        # that two sweepers at once do not claim the same units. It walks
                        # back from there, then on to the units after it, each run from its
                        # end again: a run nobody walks is still taken whole.
                        free = [i for i in range(q, until + 1) if not self.taken[i]]
                        return self._back_from(free[len(free) // 2]), listings, keys
                    return self._from_end(q, until), listings, keys
                p = self.taken.find(0, last + 1, end) if last + 1 < end else -1
        return None, listings, keys
