"""Where a learner claims next: its start, its walk, its jumps, sweeps and rest.

Deterministic: a policy is driven through its verbs only (``begin``, ``next``, ``won``,
``lost``, ``look``, ``sweep``, ``rebuild``), as the loader drives it, against a
``memory://`` mailbox whose claims the test writes, so each assertion names the exact
units a page showed. Pages are counted by the reader the loader uses.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from gradientmail import Capability, Mailbox, from_url
from gradientmail._counting import Counting, RequestTally
from gradientmail._record_codec import encode_record
from gradientmail.patterns._leases import LeaseWatcher
from gradientmail.patterns._run_layout import LEASES_PREFIX, RunLayout
from gradientmail.patterns.shared_queue._claim_pages import ClaimPages, lists_from_a_key
from gradientmail.patterns.shared_queue._idle_markers import IdleWatch
from gradientmail.patterns.shared_queue._policy import PAGE, ClaimPolicy
from gradientmail.patterns.shared_queue._policy.claim_policy import (
    DRY_PAGES,
    PROBES_BEFORE_LISTING,
    SHORT_RUN,
    SWEEPERS,
)
from gradientmail.patterns.shared_queue._stats import QueueCost
from gradientmail.patterns.shared_queue._unit_claims import UnitClaims
from gradientmail.testing import NO_LATENCY, LatencyMailbox
from tests.support.delegating import Delegating

PREFIX = "units/"
MEMBERS = [f"learner-{n}" for n in range(12)]


def ids(n: int) -> list[str]:
    return [f"u{i:05d}" for i in range(n)]


def box_with_claims(claimed: list[str]) -> Mailbox:
    box = from_url(f"memory://policy-{uuid.uuid4().hex}")
    for ident in claimed:
        assert box.put_if_absent(PREFIX + ident, b"{}")
    return box


class Policy:
    """A policy over ``box`` and the stats its reader counts listings in."""

    def __init__(
        self,
        box: Mailbox,
        identifiers: list[str],
        learner: str = "l0",
        *,
        members: list[str] | None = None,
        claimed: list[str] = (),  # type: ignore[assignment]
        shared_order: bool = True,
    ) -> None:
        self.tally = RequestTally()  # its requests, counted as an epoch's are
        reader = ClaimPages(Counting(box, self.tally), PREFIX)
        self.policy = ClaimPolicy(identifiers, learner, reader, shared_order=shared_order)
        self.policy.begin(claimed, members if members is not None else [learner, "other"])

    @property
    def stats(self) -> QueueCost:
        return QueueCost.of(self.tally.counts())

    @property
    def pages(self) -> int:
        return self.stats.listings

    def jump_after_losing(self, position: int = 0) -> int | None:
        """Lose the claim of ``position`` (claimed in the store); where the learner goes."""
        self.policy.lost(position)
        return self.policy.next()

    def walk(self, position: int | None) -> list[int]:
        """Win ``position``, then each unit the walk offers, until it jumps (lists a page)."""
        walked = []
        while position is not None:
            walked.append(position)
            self.policy.won(position)
            pages = self.pages
            position = self.policy.next()
            if self.pages != pages:
                break  # the walk ended: this was a jump
        return walked


def empty_box() -> Mailbox:
    return box_with_claims([])


def test_a_learner_alone_or_with_its_own_order_or_blind_starts_at_its_first_preference() -> None:
    alone = Policy(empty_box(), ids(100), members=[])
    assert alone.policy.next() == 0
    own_order = Policy(empty_box(), ids(100), shared_order=False)
    assert own_order.policy.next() == 0
    blind = Policy(OldList(empty_box()), ids(100))  # type: ignore[arg-type]
    assert not blind.policy.paged  # no partial listings: start together, spread on losing
    assert blind.policy.next() == 0


def test_learners_sharing_an_order_start_apart_at_points_drawn_from_their_ids() -> None:
    starts = []
    for n in range(16):
        name = f"learner-{n}"
        first = Policy(empty_box(), ids(10_000), name).policy.next()
        again = Policy(empty_box(), ids(10_000), name).policy.next()
        assert first == again  # the same id starts at the same point everywhere
        assert first == Policy(empty_box(), ids(10_000)).policy.start_of(name)
        starts.append(first)
    assert len(set(starts)) == 16
    assert max(starts) - min(starts) > 5_000  # spread over the order, not bunched


def test_a_jump_lands_only_on_a_unit_its_page_showed_free() -> None:
    identifiers = ids(10_000)
    # Everything is claimed except a few units near the end; the learner's view knows
    # nothing of it (it believes every unit free), so most pages show only claims.
    free = {9500, 9501, 9502, 9503, 9504, 9505, 9990}
    box = box_with_claims([u for p, u in enumerate(identifiers) if p not in free])
    for seed in range(10):
        learner = Policy(box, identifiers, f"l{seed}")
        position = learner.jump_after_losing()
        assert position in {9500, 9501, 9502, 9503, 9504, 9505}, (seed, position)
        assert 1 <= learner.pages <= 3 + 2 * len(identifiers) // PAGE


def test_a_jump_leaves_short_runs_to_their_walker_while_a_long_one_is_seen() -> None:
    identifiers = ids(200)
    free = {10, 11, *range(100, 100 + SHORT_RUN + 4)}
    box = box_with_claims([u for p, u in enumerate(identifiers) if p not in free])
    for seed in range(20):
        position = Policy(box, identifiers, f"l{seed}").jump_after_losing()
        assert position is not None
        assert 100 <= position < 100 + SHORT_RUN + 4


def test_with_only_short_runs_left_a_jump_takes_the_last_unit_of_one() -> None:
    identifiers = ids(200)
    box = box_with_claims([u for p, u in enumerate(identifiers) if p not in (50, 51, 52)])
    learner = Policy(box, identifiers)
    assert learner.jump_after_losing() == 52  # the walker coming from 50 reaches it last
    assert learner.pages == 1  # one page went round the whole order


@pytest.mark.parametrize(
    "run", [(0, 1, 2), (197, 198, 199), (0,), (199,)], ids=["front", "end", "first", "last"]
)
def test_a_short_run_at_either_end_of_the_order_is_found_and_walked_back(
    run: tuple[int, ...],
) -> None:
    """The first and the last positions of the order, where off-by-one errors live. (The
    other short-run tests lose position 0 to start their jump, so they never free it.)"""
    identifiers = ids(200)
    box = box_with_claims([u for p, u in enumerate(identifiers) if p not in run])
    learner = Policy(box, identifiers)
    position = learner.jump_after_losing(100)  # a claimed unit mid-order
    assert position == run[-1]  # the walker coming from the front reaches it last
    assert learner.walk(position) == list(reversed(run))


def test_a_short_run_is_walked_from_its_last_unit_back_then_the_next_ones_on_its_page() -> None:
    identifiers = ids(200)
    runs = [[52, 51, 50], [61, 60], [70]]  # the runs 50-52, 60-61 and 70, each from its end
    free = {p for run in runs for p in run}
    box = box_with_claims([u for p, u in enumerate(identifiers) if p not in free])
    for n in range(8):
        learner = Policy(box, identifiers, f"learner-{n}")
        walked = learner.walk(learner.jump_after_losing())
        first = next(k for k, run in enumerate(runs) if run[0] == walked[0])
        # Each run ends at a unit the page showed taken, then the next run from its end.
        assert walked == [p for run in runs[first:] for p in run], walked


def test_a_backward_walk_that_loses_a_claim_goes_on_to_the_next_run_from_its_end() -> None:
    """The learner walking into the run from its front claimed 50 first: the backward walk
    loses 50, and its jump goes on to the next short run's last unit."""
    identifiers = ids(200)
    free = {50, 51, 52, 60, 61}
    box = box_with_claims([u for p, u in enumerate(identifiers) if p not in free])
    learner = Policy(box, identifiers)
    position = learner.jump_after_losing()
    if position == 61:  # it chose the second run, the last on the page
        assert learner.walk(position) == [61, 60]
        return
    assert position == 52
    learner.policy.won(52)
    assert learner.policy.next() == 51
    learner.policy.won(51)
    assert learner.policy.next() == 50
    assert box.put_if_absent(PREFIX + identifiers[50], b"{}")  # the walker from the front
    assert learner.jump_after_losing(50) == 61  # 50 is taken: the next run, from its end


def test_a_short_run_in_a_long_order_is_left_to_its_walker_and_the_share_sweepers() -> None:
    """A run shorter than SHORT_RUN is in front of the learner walking into it, about to
    claim it. Where the order is longer than DRY_PAGES pages, a jump whose pages show
    nothing longer leaves it, sweeps the learner's own share and rests: only the share's
    sweepers take it: the first from its last unit back towards whoever walks it from the
    front, the second from its middle unit, so the two do not claim the same units."""
    free = range(20 * PAGE + 500, 20 * PAGE + 500 + SHORT_RUN - 1)
    identifiers, box = end_of_epoch(free)
    sweepers = rested = 0
    landed = set()
    for name in MEMBERS:
        learner = Policy(box, identifiers, name, members=MEMBERS)
        policy = learner.policy
        position = learner.jump_after_losing()
        if 20 in policy.share():
            assert position in (free[-1], free[len(free) // 2]), name
            landed.add(position)
            sweepers += 1
            policy.won(position)
            assert policy.next() == position - 1  # it walks on backward: nobody claimed it
        else:
            assert position is None, name
            assert policy.resting
            assert learner.pages <= DRY_PAGES + 2 * len(policy.share())
            rested += 1
    assert sweepers == SWEEPERS
    assert len(landed) == SWEEPERS
    assert rested == len(MEMBERS) - SWEEPERS


def test_a_run_nobody_walks_is_taken_whole_by_either_sweeper_alone() -> None:
    """Its learner died: whichever sweeper of the stretch comes, it takes every unit, the
    first from the run's last unit back, the second from its middle unit back and then from
    the last unit back to the middle."""
    free = range(20 * PAGE + 500, 20 * PAGE + 510)
    identifiers, box = end_of_epoch(free)
    walks = []
    for name in MEMBERS:
        learner = Policy(box, identifiers, name, members=MEMBERS)
        if 20 in learner.policy.share():
            # Sweeping the shares of the others (they left) covers its own stretches too.
            walks.append(learner.walk(learner.policy.sweep(MEMBERS)))
    assert sorted(walks) == sorted(
        [list(reversed(free)), [*reversed(free[:6]), *reversed(free[6:])]]
    )


def test_a_walk_stops_short_of_where_another_member_starts() -> None:
    """Every learner draws the others' starting points as they do: a walk ends on the unit
    before the next member's first one, where it would otherwise lose a claim, and that
    point stops it only once."""
    identifiers = ids(10_000)
    learners = {name: Policy(empty_box(), identifiers, name, members=MEMBERS) for name in MEMBERS}
    starts = {name: learner.policy.next() for name, learner in learners.items()}
    assert all(start is not None for start in starts.values())
    ordered = sorted(p for p in starts.values() if p is not None)
    for name, learner in learners.items():
        start = starts[name]
        assert start is not None
        assert all(other.policy.start_of(name) == start for other in learners.values())
        if start == ordered[-1]:
            continue  # the last one walks to the end of the order
        following = ordered[ordered.index(start) + 1]
        walked = learner.walk(start)
        assert walked == list(range(start, following)), name
        learner.policy.won(following - 1)  # had a jump brought it back here:
        assert learner.policy.next() == following  # the point no longer stops it


def test_a_jump_with_every_unit_claimed_finds_none_and_the_policy_is_exhausted() -> None:
    identifiers = ids(2500)
    learner = Policy(box_with_claims(identifiers), identifiers, members=[])
    assert learner.jump_after_losing() is None
    assert learner.policy.exhausted()
    assert learner.stats.listed_keys == 2499  # every claim but the one it lost, once
    assert learner.pages == 3


def test_a_walk_stops_at_a_wall_with_pages_and_walks_past_it_without() -> None:
    identifiers = ids(10)
    box = box_with_claims([identifiers[3]])
    for blind in (False, True):
        store: Mailbox = OldList(box) if blind else box  # type: ignore[assignment]
        learner = Policy(store, identifiers, members=[], claimed=[identifiers[3]])
        assert learner.policy.paged is not blind
        for p in range(3):
            learner.policy.won(p)
        position = learner.policy.next()
        if blind:
            assert position == 4  # the next unit believed free, past the wall
            assert learner.pages == 0
        else:  # another learner's stretch: jump, at the cost of one page
            assert position is not None
            assert 4 <= position < 10
            assert learner.pages == 1


def test_without_pages_a_streak_of_lost_claims_refreshes_with_one_full_listing() -> None:
    identifiers = ids(100)
    box = box_with_claims(identifiers[:60])
    learner = Policy(OldList(box), identifiers, members=[])  # type: ignore[arg-type]
    for p in range(PROBES_BEFORE_LISTING - 1):
        learner.policy.lost(p)
    assert learner.pages == 0  # a lost claim alone costs no listing
    learner.policy.lost(PROBES_BEFORE_LISTING - 1)
    assert (learner.pages, learner.stats.listed_keys) == (1, 60)
    position = learner.policy.next()  # the listing's claims are known: past them
    assert position is not None
    assert position >= 60


class OldList(Delegating):
    """A wrapper written before partial listings: it forwards the capabilities."""

    def list(self, prefix: str = "") -> Iterator[str]:
        return self.inner.list(prefix)


def test_a_wrapper_whose_list_takes_no_start_after_is_treated_as_without_pages() -> None:
    inner = empty_box()
    assert lists_from_a_key(inner)
    assert lists_from_a_key(LatencyMailbox(inner, NO_LATENCY))
    wrapped = OldList(inner)
    assert wrapped.supports(Capability.LIST_START_AFTER)
    assert not lists_from_a_key(wrapped)  # type: ignore[arg-type]


@pytest.mark.parametrize("order", [["u00002", "u00001", "u00000"], ids(3)])
def test_only_the_sorted_order_is_read_by_pages(order: list[str]) -> None:
    assert Policy(empty_box(), order).policy.paged == (order == sorted(order))


def test_scattered_free_units_are_taken_one_after_another_from_one_page() -> None:
    identifiers = ids(3000)
    free = [p for p in range(len(identifiers)) if p % 10 == 9]  # a resumed run, 90 % done
    box = box_with_claims([u for p, u in enumerate(identifiers) if p % 10 != 9])
    learner = Policy(box, identifiers)
    position = learner.jump_after_losing()
    # Three pages hold every claim: they go round the whole order and show only runs of
    # one, so the jump takes one from the freshest page and walks on to the others there.
    assert learner.pages <= 3
    assert position in free
    pages = learner.pages
    taken = learner.walk(position)  # claim, then walk on without another page
    assert taken == [p for p in free if taken[0] <= p <= taken[-1]]
    assert taken[-1] >= 999  # the first page: 1000 claims and the free units among them
    assert learner.pages > pages  # the page is used up: the next position is a jump's


def test_every_stretch_is_swept_by_two_members_and_knowing_fewer_sweeps_more() -> None:
    identifiers = ids(40 * PAGE)
    box = empty_box()
    shares: dict[str, set[int]] = {}
    for name in MEMBERS:
        shares[name] = set(Policy(box, identifiers, name, members=MEMBERS).policy.share())
    for stretch in range(40):
        assert sum(stretch in share for share in shares.values()) == SWEEPERS, stretch
    # A learner that started before some others (it knows fewer) sweeps a superset of its
    # share, so every stretch keeps a sweeper that knows itself to be one.
    for n, name in enumerate(MEMBERS):
        known = [m for k, m in enumerate(MEMBERS) if k % 3 == n % 3 or m == name]
        assert set(Policy(box, identifiers, name, members=known).policy.share()) >= shares[name]
    # Two members or fewer: each sweeps everything.
    assert Policy(box, identifiers, "a", members=["a", "b"]).policy.share() == list(range(40))


def end_of_epoch(free: range) -> tuple[list[str], Mailbox]:
    """50 stretches, every unit claimed but ``free``, which lie in one stretch."""
    identifiers = ids(50 * PAGE)
    box = box_with_claims([u for p, u in enumerate(identifiers) if p not in free])
    return identifiers, box


def rests(learner: Policy) -> bool:
    """Lose a claim, jump with a stale view; whether the search ended in a rest."""
    return learner.jump_after_losing() is None and learner.policy.resting


def test_after_dry_pages_a_learner_sweeps_only_its_share_then_rests() -> None:
    free = range(20 * PAGE + 500, 20 * PAGE + 510)
    identifiers, box = end_of_epoch(free)
    rested = found = 0
    for name in MEMBERS:
        # Its view is stale: it believes every unit free.
        learner = Policy(box, identifiers, name, members=MEMBERS)
        policy = learner.policy
        share = policy.share()
        position = learner.jump_after_losing()
        if 20 in share:
            assert position in free, name  # its sweep finds them, at the latest
            found += 1
        elif position is None:
            # Dry pages, then its own share, not the whole order (50 pages).
            assert policy.resting
            assert learner.pages <= DRY_PAGES + 2 * len(share)
            assert learner.stats.listed_keys < len(identifiers) - len(free)
            assert not policy.exhausted()
            pages = learner.pages
            assert policy.next() is None  # resting lists nothing
            assert learner.pages == pages
            policy.rebuild(set())  # a scan found units free again: it searches again
            assert not policy.resting
            rested += 1
        else:
            assert position in free, name  # a dry page's neighbour happened to show them
    assert found == SWEEPERS
    assert rested >= 3


def test_a_watcher_sweeps_the_share_of_a_learner_that_left() -> None:
    free = range(20 * PAGE + 500, 20 * PAGE + 510)
    identifiers, box = end_of_epoch(free)
    names = [f"gone-{n}" for n in range(6)] + ["me"]
    learner = Policy(box, identifiers, "me", members=names)
    policy = learner.policy
    assert 20 not in policy.share()  # the free units are not in the watcher's own share
    assert rests(learner)
    for name in names:
        record: dict[str, object] = {"holder": name}
        record["state"] = "finished" if name != "me" else "running"
        record.update({"lease": 60.0, "incarnation": 1, "epoch": 0})
        box.put(LEASES_PREFIX + name, encode_record(record))
    watcher = LeaseWatcher(box, LEASES_PREFIX, duration=60.0)
    watch = IdleWatch(UnitClaims(box, RunLayout(0), "me", 1), watcher, 20.0)
    watch.mark()
    poll = watch.poll()
    assert sorted(poll.absent) == names[:-1]  # marked on their behalf: they left
    assert poll.nobody_busy
    assert 20 in {s for name in poll.absent for s in policy.share(name)}
    position = policy.sweep(poll.absent)
    assert not policy.resting
    # Nobody walks the run (its learners left): the watcher takes all of it, from its last
    # unit back, where a learner walking it from the front would meet it.
    assert learner.walk(position) == list(reversed(free))


def test_pages_in_a_row_tile_the_order_instead_of_listing_a_stretch_twice() -> None:
    """A stale view believes many scattered runs free; the store has all but two units
    claimed. The pages of one jump start at a run drawn at random, then go on after what
    they covered, so together they list each claim about once: at most one page more than
    a full listing, however the first run falls, and then the sweep's page of its share,
    where the free units are."""
    identifiers = ids(8 * PAGE)
    free = [len(identifiers) - 2, len(identifiers) - 1]
    box = box_with_claims([u for p, u in enumerate(identifiers) if p not in free])
    full_listing = len(identifiers) // PAGE
    # 40 runs believed free: the learner's scan saw the claims of every other block.
    seen = [u for p, u in enumerate(identifiers) if p % 200 < 100]
    for n in range(12):
        learner = Policy(box, identifiers, f"learner-{n}", claimed=seen)
        position = learner.jump_after_losing(0)
        assert position in free, n
        assert learner.pages <= full_listing + 2, n
        assert learner.stats.listed_keys <= len(identifiers) + 2 * PAGE, n


def resting_learners(box: Mailbox, identifiers: list[str], away: set[int]) -> Iterator[Policy]:
    """Learners that rest after a jump with a stale view, none of whose shares (or first
    pages) held a stretch in ``away``."""
    for n in range(200):
        learner = Policy(box, identifiers, f"learner-{n}", members=MEMBERS)
        if not away & set(learner.policy.share()) and rests(learner):
            yield learner


def test_a_resting_learner_looks_a_page_further_each_time_and_shares_a_long_run() -> None:
    """Runs still long elsewhere when a learner rests are found a page at a time, and
    entered in their middle half; a short run is left to the learner walking into it, and
    the looks stop after one listing of the order."""
    long_run = range(30 * PAGE + 200, 30 * PAGE + 300)
    short_run = range(10 * PAGE + 5, 10 * PAGE + 7)
    identifiers = ids(50 * PAGE)
    free = set(long_run) | set(short_run)
    box = box_with_claims([u for p, u in enumerate(identifiers) if p not in free])
    starts = set()
    for _, learner in zip(range(6), resting_learners(box, identifiers, {10, 30}), strict=False):
        policy = learner.policy
        looks = 0
        while True:
            pages = learner.pages
            position = policy.look()
            looks += 1
            assert learner.pages == pages + 1  # each look lists one page
            if position is not None:
                break
            assert looks <= 51
        starts.add(looks)
        assert long_run[0] + 25 <= position < long_run[0] + 75  # the middle half
        assert not policy.resting
        policy.won(position)
        assert policy.next() == position + 1
    assert len(starts) > 1  # the looks of different learners start apart
    # Nothing long is left: a resting learner looks at most one listing's worth, then stops.
    box2 = box_with_claims([u for p, u in enumerate(identifiers) if p not in short_run])
    tired = next(resting_learners(box2, identifiers, {10}))
    policy = tired.policy
    pages = tired.pages
    assert all(policy.look() is None for _ in range(60))
    assert 50 <= tired.pages - pages <= 51
    assert policy.resting
    assert policy.looked_everywhere
    assert policy.look() is None
    assert tired.pages - pages <= 51  # no page more
    policy.rebuild(set())  # a scan found units free again: it searches (and looks) afresh
    assert not policy.resting


def claim_until_won(learner: Policy, box: Mailbox, identifiers: list[str]) -> tuple[int, int]:
    """Claim as the loader does (``put_if_absent``, then ``won`` or ``lost``) until a claim
    is won; the position won and the claims lost on the way."""
    lost = 0
    while True:
        position = learner.policy.next()
        assert position is not None, "no unit believed free, although one is"
        if box.put_if_absent(PREFIX + identifiers[position], b"{}"):
            learner.policy.won(position)
            return position, lost
        learner.policy.lost(position)
        lost += 1
        assert lost <= len(identifiers), "it never found the free units"


def test_learners_that_start_together_lose_no_claim_where_another_starts() -> None:
    """Each member claims its first unit at once; a learner walking up to the next member's
    start loses no claim there (it costs a create each): it jumps, its page shows the
    member's claims, and it claims a unit still free."""
    identifiers = ids(10_000)
    probe = Policy(empty_box(), identifiers, members=MEMBERS).policy
    starts = sorted(probe.start_of(name) for name in MEMBERS)
    for name in MEMBERS:
        start = probe.start_of(name)
        if start == starts[-1]:
            continue  # the last one walks to the end of the order
        following = starts[starts.index(start) + 1]
        box = box_with_claims([identifiers[p] for p in starts if p != start])
        learner = Policy(box, identifiers, name, members=MEMBERS)
        claimed = []
        while learner.pages == 0:  # its walk, up to the jump
            position, lost = claim_until_won(learner, box, identifiers)
            assert lost == 0, (name, position)
            claimed.append(position)
        assert claimed[: following - start] == list(range(start, following)), name
        assert following not in claimed


def test_a_blind_learner_with_a_stale_view_loses_a_few_claims_then_lists_once() -> None:
    """Without partial listings a learner that believes every unit free while most are
    claimed probes a few units, then refreshes what it believes with one full listing and
    claims a free unit: it does not lose a claim on every unit others hold."""
    identifiers = ids(1000)
    free = range(900, 1000)
    for name in MEMBERS:
        box = box_with_claims([u for p, u in enumerate(identifiers) if p not in free])
        learner = Policy(OldList(box), identifiers, name, members=[])  # type: ignore[arg-type]
        assert not learner.policy.paged
        position, lost = claim_until_won(learner, box, identifiers)
        assert position in free, name
        assert lost <= PROBES_BEFORE_LISTING, (name, lost)
        assert learner.pages <= 1, name
        assert learner.stats.listed_keys <= len(identifiers) - len(free), name


def test_a_sweep_takes_a_run_at_the_front_of_the_order_down_to_position_0() -> None:
    """Nobody walks a run at position 0 (its learner left): whichever sweeper of the first
    stretch comes takes every unit of it, the first unit of the order included."""
    free = range(0, 3)
    identifiers, box = end_of_epoch(free)
    walks = []
    for name in MEMBERS:
        learner = Policy(box, identifiers, name, members=MEMBERS)
        if 0 in learner.policy.share():
            walks.append(learner.walk(learner.policy.sweep(MEMBERS)))
    assert len(walks) == SWEEPERS
    assert sorted(walks) == sorted([[2, 1, 0], [1, 0, 2]])


def test_a_jumps_pages_go_on_to_a_free_unit_at_the_very_end_of_the_order() -> None:
    """A stale view believes a run at the front free and the last unit; the store has only
    the last unit free. The page at the front shows its run taken, and the next page starts
    at the next run believed free after it, the last unit, not back at the front: every
    learner claims it, whatever its share of the sweep."""
    identifiers = ids(3 * PAGE)
    last = len(identifiers) - 1
    box = box_with_claims(identifiers[:last])
    seen = identifiers[10:last]  # its scan saw the claims between
    for name in MEMBERS:
        learner = Policy(box, identifiers, name, members=MEMBERS, claimed=seen)
        assert learner.jump_after_losing(0) == last, name
        assert learner.pages == 2, name  # the front's page, then the end's
