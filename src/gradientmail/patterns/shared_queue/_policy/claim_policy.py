"""Which unit a ``shared_queue`` learner claims next: one closed object, a few verbs.

A learner walks its preference order and keeps to its own stretch of it; after a lost
claim or a wall it jumps into a run it believes free; near the end it sweeps its share of
the order and then rests, looking one page further each time it waits. The policy decides
positions only. It sees the store through the :class:`PageReader` it is handed, marks
what it learns is taken (marks are only ever added, so "taken" is never wrong), and is
told of each claim's outcome (:meth:`ClaimPolicy.won`, :meth:`ClaimPolicy.lost`);
nothing outside writes its state. ``docs/shared-queue.md`` ("How a learner chooses its
next unit") describes the walk, the jumps, the sweeps and the rest in full, with the
benchmarks behind them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from gradientmail.patterns._hash_ring import Ring, point, seed_of
from gradientmail.patterns.shared_queue._policy.free_runs import PAGE, FreeRuns, PageReader
from gradientmail.patterns.shared_queue._policy.walk import Walk

__all__ = [
    "DRY_PAGES",
    "PAGE",
    "PROBES_BEFORE_LISTING",
    "SHORT_RUN",
    "SWEEPERS",
    "ClaimPolicy",
    "PageReader",
]

#: Claims lost in a row before a policy without partial listings refreshes what it
#: believes with a full listing; until then a learner that loses jumps elsewhere, which
#: costs one create.
PROBES_BEFORE_LISTING = 4
#: Runs shorter than this are left to the learner walking into them; a jump enters longer
#: ones in their middle half.
SHORT_RUN = 4
#: Pages in a row that showed no run worth taking (:data:`SHORT_RUN` free units or more)
#: before a learner stops searching the whole order: the end of the epoch is near, and
#: what is still free is either in front of the learner that claimed the unit before it,
#: or in some learner's share (see :meth:`ClaimPolicy.share`).
DRY_PAGES = 10
#: How many learners sweep each stretch of :data:`PAGE` units at the end of an epoch.
SWEEPERS = 2


@dataclass
class _Search:
    """How the search for free runs has gone."""

    #: The search is over: the last pages were dry and this learner's share is taken.
    #: Jumps list nothing until :meth:`ClaimPolicy.rebuild` (a scan found free units).
    resting: bool = False
    jumps: int = 0
    #: Claims lost in a row (since the last win or full listing).
    losses: int = 0
    #: Pages in a row that showed no run worth taking.
    dry: int = 0
    #: While resting: where the next look lists from, and the pages looked at since the
    #: rest began (see :meth:`ClaimPolicy.look`).
    look_from: int = 0
    looked: int = 0


class ClaimPolicy:
    """Which units this learner believes are taken, and where it claims next.

    Args:
        identifiers: the preference order.
        learner_id: seeds this learner's jump points and places it among the members.
        reader: lists pages of claims; pages are read only where ``reader.partial`` is
            true and the order is the sorted order (a page then covers one stretch).
        shared_order: every learner has this order (no ``order=``), so learners that start
            together should start apart; with an ``order=`` of its own a learner starts at
            its first preference.
        weight: how much a jump favours a run of a given length (default: its square).
    """

    def __init__(
        self,
        identifiers: list[str],
        learner_id: str,
        reader: PageReader,
        *,
        shared_order: bool = True,
        weight: Callable[[int], int] | None = None,
    ) -> None:
        self._runs = runs = FreeRuns(identifiers, seed_of(learner_id), weight)
        self._reader = reader
        self._learner_id = learner_id
        self._shared_order = shared_order
        self._paged = runs.sorted and reader.partial
        #: The learners with a lease when this one started, itself included: they split
        #: the end-of-epoch sweep (see :meth:`share`).
        self._members: list[str] = [learner_id]
        self._walk = Walk()
        self._search = _Search()

    # -- what it knows ------------------------------------------------------------------------

    @property
    def identifiers(self) -> Sequence[str]:
        """The preference order."""
        return self._runs.identifiers

    @property
    def position(self) -> Mapping[str, int]:
        """Each unit's position in the preference order."""
        return self._runs.position

    @property
    def paged(self) -> bool:
        """Whether jumps list a page of claims first (partial listings, sorted order)."""
        return self._paged

    @property
    def resting(self) -> bool:
        """Whether the search is over until :meth:`rebuild`: only :meth:`look` lists."""
        return self._search.resting

    @property
    def looked_everywhere(self) -> bool:
        """Whether the looks of this rest have listed the whole order."""
        return self._search.looked > self._runs.pages

    def exhausted(self) -> bool:
        """Whether every unit is believed taken (with compare-and-swap: is taken)."""
        return self._runs.exhausted()

    def start_of(self, learner_id: str) -> int:
        """Where the learner ``learner_id`` starts when it starts apart: its point on the
        hash ring, scaled to the order, the same on every learner."""
        return point(learner_id) * len(self._runs.identifiers) >> 64

    def share(self, member: str | None = None) -> list[int]:
        """The stretches of :data:`PAGE` units that ``member`` (default: this learner)
        sweeps at the end of the epoch, by number.

        Each stretch is swept by the :data:`SWEEPERS` members that follow it on a hash
        ring of the members. A learner that knows fewer members than another sweeps more,
        never less: the first member after a stretch among all of them is also the first
        among those it knows itself. So every stretch is swept by a live learner unless
        its sweepers died or left, which the watchers of waiting learners notice (see
        :mod:`gradientmail.patterns.shared_queue._idle_markers`).
        """
        me = self._learner_id if member is None else member
        ring = Ring([*self._members, me])
        return [s for s in range(self._runs.pages) if me in _sweepers(ring, s)]

    # -- what it is told ----------------------------------------------------------------------

    def begin(self, claimed: Iterable[str], members: Iterable[str]) -> None:
        """The learner starts: ``claimed`` are taken, ``members`` hold leases.

        A learner alone, with an order of its own, or without pages, starts at its first
        preference. Otherwise it starts at a point drawn from its id (:meth:`start_of`), so
        learners that start together start apart, and its walk stops short of where each
        other member starts instead of losing a claim on that member's first unit. (A blind
        learner that started apart would run into the others' stretches unseen, a lost
        claim each.)
        """
        self._runs.mark(claimed)
        self._members = sorted({*members, self._learner_id})
        alone = len(self._members) == 1
        if not alone and self._shared_order and self._paged and self._runs.identifiers:
            walk = self._walk
            walk.next = self.start_of(self._learner_id)
            self._search.jumps = 1  # the start was the spreading jump
            walk.stops = {self.start_of(m) for m in self._members} - {walk.next}

    def won(self, position: int) -> None:
        """This learner won the claim of ``position``: walk on from it."""
        self._runs.taken[position] = 1
        self._walk.won(position)
        self._search.losses = 0

    def lost(self, position: int) -> None:
        """Another learner holds ``position``: the next claim jumps elsewhere.

        Without pages, a streak of :data:`PROBES_BEFORE_LISTING` losses refreshes what the
        policy believes with one full listing (it is too stale for probing alone).
        """
        self._runs.taken[position] = 1
        search = self._search
        search.losses += 1
        if search.losses >= PROBES_BEFORE_LISTING and not self._paged:
            self._runs.mark(self._reader.everything())
            search.losses = 0

    def rebuild(self, claimed: set[str]) -> None:
        """A scan found exactly ``claimed`` taken (units released by deletion are free)."""
        runs = self._runs
        runs.taken = bytearray(len(runs.identifiers))
        runs.mark(claimed)
        self._search.resting = False
        self._search.dry = 0
        self._walk.backward = False

    # -- where next ---------------------------------------------------------------------------

    def next(self) -> int | None:
        """The position to claim next; ``None`` when no unit is believed free (or, while
        resting, none was found: see :meth:`look`)."""
        p = None if self._search.losses else self._walk.candidate(self._runs.taken, self._paged)
        return self._jump() if p is None else p

    def look(self) -> int | None:
        """While resting: list one page further on; end the rest at a run worth sharing.

        A learner rests after dry pages in one part of the order, while runs may still be
        long elsewhere, in front of slow learners. So each time it waits it lists one more
        page, going on from a point drawn from its seed, and at most one listing of the
        order in all (until :meth:`rebuild`): many resting learners together cover the
        order within a wait or two. A page that shows a run of :data:`SHORT_RUN` units or
        more free ends the rest, and the learner moves into the run's middle half,
        splitting it with the learner walking it; shorter runs are left to that learner.

        Returns:
            The position to claim, or ``None`` while it rests.
        """
        runs, search = self._runs, self._search
        if not (self._paged and search.resting) or search.looked > runs.pages:
            return None
        run = runs.run_after(search.look_from - 1)  # the first position believed free on
        if run is None:
            return None  # every unit is taken
        last = runs.list_page(self._reader, run[0])
        search.looked += 1
        search.look_from = last + 1 if last + 1 < len(runs.taken) else 0
        found = runs.pick_run(within=(run[0], last), shortest=SHORT_RUN)
        if found is None:
            return None
        start, length = found
        search.resting = False
        search.dry = 0
        self._walk.sparse_until = -1
        search.jumps += 1
        return self._walk.forward_from(start + int(length * runs.rng.uniform(0.25, 0.75)))

    def sweep(self, members: Iterable[str]) -> int | None:
        """List the shares of ``members`` (they left); move into the free runs shown.

        Only with pages. Each run is walked backward from its last unit: a live learner may
        be walking it from its front (they meet where their paces put them), or nobody (its
        learner died, or an earlier run left it), and then this learner takes it whole. The
        second sweeper of a stretch starts at its middle free unit instead, so that the two
        do not claim the same units.

        Returns:
            The position to claim; ``None`` when every unit of the shares is taken.
        """
        if not self._paged:
            return None
        return self._sweep(sorted({s for member in members for s in self.share(member)}))

    # -- jumps and sweeps ---------------------------------------------------------------------

    def _jump(self) -> int | None:
        """Move into a run believed free; ``None`` when no unit is believed free."""
        runs, search = self._runs, self._search
        if not self._paged:
            run = runs.largest_run()
        elif search.resting:
            return None
        else:
            run = self._verified_run()
            if run is None and not runs.exhausted():
                # The last pages were dry: sweep this learner's share, then rest.
                found = self._sweep(self.share())
                search.resting = found is None
                if search.resting:
                    # Looks while resting start apart (see look).
                    search.look_from = int(len(runs.identifiers) * runs.rng.random())
                    search.looked = 0
                return found
        if run is None:
            return None
        start, length = run
        if not self._paged:
            # Blind: the middle half of the largest run (a stale view believes most units
            # free, so a point far from both ends is the likeliest to be free).
            offset = int(length * runs.rng.uniform(0.25, 0.75)) if length > 2 else 0
        elif length < SHORT_RUN:
            # Only short runs are left: walk one from its last unit back towards the learner
            # walking into it from its start, then the page's other short runs alike.
            search.jumps += 1
            return self._walk.from_end(runs.taken, start, start + length - 1)
        elif search.jumps == 0:
            offset = int(length * runs.rng.random())
        else:
            # The middle half: the learner walking into the run from its start and this one
            # split it, and meet only when both have walked a quarter of it.
            offset = int(length * runs.rng.uniform(0.25, 0.75))
        search.jumps += 1
        return self._walk.forward_from(start + offset)

    def _verified_run(self) -> tuple[int, int] | None:
        """A run of :data:`SHORT_RUN` units or more that a page listed a moment ago showed
        free; else, if the pages went round the whole order, a shorter one from the freshest
        page that showed one; else ``None`` (after :data:`DRY_PAGES` pages that showed no
        run worth taking, or none free).
        """
        runs, search = self._runs, self._search
        run = runs.pick_run(shortest=SHORT_RUN) or runs.pick_run()
        # Each page marks what it shows taken, so a stale view converges. A page costs one
        # request, as a lost claim does, and shows up to a thousand claims where a lost
        # claim shows one. The first page starts at a run drawn at random (learners that
        # jump together spread); each further one starts at the next run believed free
        # after what the pages so far covered, so pages in a row tile the order and never
        # list a stretch twice.
        # Positions in the order of the pages so far, counted on from the first page's start
        # (each wrap to the front counts ``len(order)`` more).
        origin, offset, n = (run[0] if run else 0), 0, len(runs.identifiers)
        short: tuple[int, int] | None = None
        short_last = -1
        while run is not None:
            # List the claims from the run's start, then choose in the stretch the page
            # covered: what it shows free was free a moment ago.
            last = runs.list_page(self._reader, run[0])
            found = runs.pick_run(within=(run[0], last), shortest=SHORT_RUN)
            if found is not None:
                self._walk.sparse_until = -1
                search.dry = 0
                return found
            seen = runs.pick_run(within=(run[0], last))
            if seen is not None:
                short, short_last = seen, last  # the freshest page that showed one
            search.dry += 1
            if search.dry >= DRY_PAGES:
                if short is not None:
                    break  # only short runs are left: take the freshest page's
                return None  # the end is near: sweep the share, then rest
            run = runs.run_after(last, shortest=SHORT_RUN) or runs.run_after(last)
            if run is not None and run[0] <= last:
                offset += n  # wrapped to the front
            if run is not None and offset + run[0] >= origin + n:
                break  # the pages (and the claims known between them) went round the order
        if short is not None:
            # The pages went round the whole order and nothing longer is free: the short
            # runs of the freshest page that showed one, each from its last unit.
            self._walk.sparse_until = short_last
            search.dry = 0
        return short

    def _sweep(self, stretches: list[int]) -> int | None:
        """List the ``stretches``' claims; move into the free runs they show (see
        :meth:`sweep`)."""
        runs, walk = self._runs, self._walk
        for stretch in stretches:
            first, end = stretch * PAGE, min((stretch + 1) * PAGE, len(runs.taken))
            p = runs.taken.find(0, first, end)
            while p >= 0:
                last = runs.list_page(self._reader, p)
                until = min(last, end - 1)
                q = runs.taken.find(0, p, until + 1)
                if q >= 0:
                    self._search.dry = 0
                    self._search.resting = False
                    walk.sparse_until = until
                    ring = Ring([*self._members, self._learner_id])
                    if self._learner_id in _sweepers(ring, stretch)[1:]:
                        # The second sweeper: from the middle free unit of the stretch, so
                        # that two sweepers at once do not claim the same units. It walks
                        # back from there, then on to the units after it, each run from its
                        # end again: a run nobody walks is still taken whole.
                        free = [i for i in range(q, until + 1) if not runs.taken[i]]
                        return walk.back_from(free[len(free) // 2])
                    return walk.from_end(runs.taken, q, until)
                p = runs.taken.find(0, last + 1, end) if last + 1 < end else -1
        return None


def _sweepers(ring: Ring, stretch: int) -> list[str]:
    """The members that sweep ``stretch``, first sweeper first."""
    return ring.successors(f"stretch {stretch}", SWEEPERS)
