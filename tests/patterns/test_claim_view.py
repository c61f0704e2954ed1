"""Where a learner claims next: its start, its jumps, and what a jump may land on.

Deterministic: a view is driven directly against a ``memory://`` mailbox whose claims the
test writes, so each assertion names the exact units a page showed.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from gradientmail import Capability, Mailbox, from_url
from gradientmail.patterns.claims import encode_record
from gradientmail.patterns.leases import LeaseWatcher
from gradientmail.patterns.run_layout import LEASES_PREFIX, RunLayout
from gradientmail.patterns.shared_queue.idle_markers import IdleWatch
from gradientmail.patterns.shared_queue.policy.view import (
    DRY_PAGES,
    PAGE,
    SHORT_RUN,
    SWEEPERS,
    View,
    lists_from_a_key,
)
from gradientmail.testing import NO_LATENCY, LatencyMailbox
from tests.support.delegating import Delegating

PREFIX = "units/"


def ids(n: int) -> list[str]:
    return [f"u{i:05d}" for i in range(n)]


def box_with_claims(claimed: list[str]) -> Mailbox:
    box = from_url(f"memory://view-{uuid.uuid4().hex}")
    for ident in claimed:
        assert box.put_if_absent(PREFIX + ident, b"{}")
    return box


def paged(identifiers: list[str], learner: str = "l0") -> View:
    view = View(identifiers, learner)
    view.paged = True
    return view


def walk(view: View, position: int | None) -> list[int]:
    """Claim ``position``, then each unit the view offers next, until it says to jump."""
    walked = []
    while position is not None:
        walked.append(position)
        view.taken[position] = 1
        view.claimed(position)
        position = view.candidate()
    return walked


def test_a_learner_alone_or_with_its_own_order_or_blind_starts_at_its_first_preference() -> None:
    alone = paged(ids(100))
    alone.start_at(alone=True)
    assert alone.next == 0
    own_order = View(ids(100), "l0", shared_order=False)
    own_order.paged = True
    own_order.start_at(alone=False)
    assert own_order.next == 0
    blind = View(ids(100), "l0")  # no partial listings: start together, spread on losing
    blind.start_at(alone=False)
    assert blind.next == 0


def test_learners_sharing_an_order_start_apart_at_points_drawn_from_their_ids() -> None:
    starts = []
    for n in range(16):
        view = paged(ids(10_000), f"learner-{n}")
        view.start_at(alone=False)
        again = paged(ids(10_000), f"learner-{n}")
        again.start_at(alone=False)
        assert view.next == again.next  # the same id starts at the same point everywhere
        starts.append(view.next)
    assert len(set(starts)) == 16
    assert max(starts) - min(starts) > 5_000  # spread over the order, not bunched


def test_a_jump_lands_only_on_a_unit_its_page_showed_free() -> None:
    identifiers = ids(10_000)
    # Everything is claimed except a few units near the end; the learner's view knows
    # nothing of it (it believes every unit free), so most pages show only claims.
    free = {9500, 9501, 9502, 9503, 9504, 9505, 9990}
    box = box_with_claims([u for p, u in enumerate(identifiers) if p not in free])
    for seed in range(10):
        view = paged(identifiers, f"l{seed}")
        view.jumps = 1
        position, listings, _ = view.jump(box, PREFIX)
        assert position in {9500, 9501, 9502, 9503, 9504, 9505}, (seed, position)
        assert 1 <= listings <= 3 + 2 * len(identifiers) // PAGE


def test_a_jump_leaves_short_runs_to_their_walker_while_a_long_one_is_seen() -> None:
    identifiers = ids(200)
    free = {10, 11, *range(100, 100 + SHORT_RUN + 4)}
    box = box_with_claims([u for p, u in enumerate(identifiers) if p not in free])
    for seed in range(20):
        view = paged(identifiers, f"l{seed}")
        view.jumps = 1
        position, _, _ = view.jump(box, PREFIX)
        assert position is not None
        assert 100 <= position < 100 + SHORT_RUN + 4


def test_with_only_short_runs_left_a_jump_takes_the_last_unit_of_one() -> None:
    identifiers = ids(200)
    box = box_with_claims([u for p, u in enumerate(identifiers) if p not in (50, 51, 52)])
    view = paged(identifiers)
    view.jumps = 1
    position, listings, _ = view.jump(box, PREFIX)
    assert position == 52  # the walker coming from 50 reaches it last
    assert listings == 1  # one page went round the whole order


def test_a_short_run_is_walked_from_its_last_unit_back_then_the_next_ones_on_its_page() -> None:
    identifiers = ids(200)
    runs = [[52, 51, 50], [61, 60], [70]]  # the runs 50-52, 60-61 and 70, each from its end
    free = {p for run in runs for p in run}
    box = box_with_claims([u for p, u in enumerate(identifiers) if p not in free])
    for n in range(8):
        view = paged(identifiers, f"learner-{n}")
        view.jumps = 1
        position, _, _ = view.jump(box, PREFIX)
        walked = walk(view, position)
        first = next(k for k, run in enumerate(runs) if run[0] == walked[0])
        assert walked == [p for run in runs[first:] for p in run], walked


def test_walking_a_short_run_back_ends_at_a_unit_known_taken() -> None:
    """The learner walking into the run from its front claimed 50 and a page showed it: the
    backward walk ends at 51 and goes on to the next run's last unit."""
    identifiers = ids(200)
    free = {50, 51, 52, 60, 61}
    box = box_with_claims([u for p, u in enumerate(identifiers) if p not in free])
    view = paged(identifiers)
    view.jumps = 1
    position, _, _ = view.jump(box, PREFIX)
    if position == 61:  # it chose the second run, the last on the page
        assert walk(view, position) == [61, 60]
        return
    assert position == 52
    view.taken[52] = 1
    view.claimed(52)
    view.mark([identifiers[50]])
    assert view.candidate() == 51
    view.taken[51] = 1
    view.claimed(51)
    assert view.candidate() == 61  # 50 is taken: the run is done; the next, from its end


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
        view = paged(identifiers, name)
        view.members = MEMBERS
        view.jumps = 1
        position, listings, _ = view.jump(box, PREFIX)
        if 20 in view.share():
            assert position in (free[-1], free[len(free) // 2]), name
            assert view.candidate() == position  # it walks on backward: nobody claimed it
            landed.add(position)
            sweepers += 1
        else:
            assert position is None, name
            assert view.resting
            assert listings <= DRY_PAGES + 2 * len(view.share())
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
        view = paged(identifiers, name)
        view.members = MEMBERS
        if 20 in view.share():
            position, _, _ = view.sweep(box, PREFIX, [20])
            walks.append(walk(view, position))
    assert sorted(walks) == sorted(
        [list(reversed(free)), [*reversed(free[:6]), *reversed(free[6:])]]
    )


def test_a_walk_stops_short_of_where_another_member_starts() -> None:
    """Every learner draws the others' starting points as they do: a walk ends on the unit
    before the next member's first one, where it would otherwise lose a claim, and that
    point stops it only once."""
    identifiers = ids(10_000)
    views = {}
    for name in MEMBERS:
        view = paged(identifiers, name)
        view.members = MEMBERS
        view.start_at(alone=False)
        views[name] = view
    starts = sorted(view.next for view in views.values())
    for name, view in views.items():
        assert all(other.start_of(name) == view.next for other in views.values())
        if view.next == starts[-1]:
            continue  # the last one walks to the end of the order
        following = starts[starts.index(view.next) + 1]
        walked = walk(view, view.candidate())
        assert walked == list(range(walked[0], following)), name
        assert view.next == following
        view.next = following  # had it jumped back here, the point no longer stops it
        assert view.candidate() == following


def test_a_jump_with_every_unit_claimed_finds_none_and_the_view_is_exhausted() -> None:
    identifiers = ids(2500)
    box = box_with_claims(identifiers)
    view = paged(identifiers)
    position, listings, keys = view.jump(box, PREFIX)
    assert position is None
    assert view.exhausted()
    assert keys == 2500
    assert listings == 3


def test_a_walk_stops_at_a_wall_with_pages_and_walks_past_it_without() -> None:
    view = View(ids(10), "l0")
    view.taken[3] = 1
    view.next = 3
    view.paged = True
    assert view.candidate() is None  # another learner's stretch: jump (one page)
    view.paged = False
    assert view.candidate() == 4  # blind: the next unit believed free


class OldList(Delegating):
    """A wrapper written before partial listings: it forwards the capabilities."""

    def list(self, prefix: str = "") -> Iterator[str]:
        return self.inner.list(prefix)


def test_a_wrapper_whose_list_takes_no_start_after_is_treated_as_without_pages() -> None:
    inner = from_url(f"memory://view-{uuid.uuid4().hex}")
    assert lists_from_a_key(inner)
    assert lists_from_a_key(LatencyMailbox(inner, NO_LATENCY))
    wrapped = OldList(inner)
    assert wrapped.supports(Capability.LIST_START_AFTER)
    assert not lists_from_a_key(wrapped)  # type: ignore[arg-type]


@pytest.mark.parametrize("order", [["u00002", "u00001", "u00000"], ids(3)])
def test_only_the_sorted_order_counts_as_sorted(order: list[str]) -> None:
    assert View(order, "l0").sorted == (order == sorted(order))


def test_scattered_free_units_are_taken_one_after_another_from_one_page() -> None:
    identifiers = ids(3000)
    free = [p for p in range(len(identifiers)) if p % 10 == 9]  # a resumed run, 90 % done
    box = box_with_claims([u for p, u in enumerate(identifiers) if p % 10 != 9])
    view = paged(identifiers)
    view.jumps = 1
    position, listings, _ = view.jump(box, PREFIX)
    # Three pages hold every claim: they go round the whole order and show only runs of
    # one, so the jump takes one from the freshest page and walks on to the others there.
    assert listings <= 3
    assert position in free
    until = view.sparse_until
    assert until >= 999  # the first page: 1000 claims and the free units among them
    taken = walk(view, position)  # claim, then walk on without another page
    assert taken == [p for p in free if taken[0] <= p <= until]
    assert view.sparse_until == -1  # the page is used up and forgotten


MEMBERS = [f"learner-{n}" for n in range(12)]


def test_every_stretch_is_swept_by_two_members_and_knowing_fewer_sweeps_more() -> None:
    identifiers = ids(40 * PAGE)
    shares: dict[str, set[int]] = {}
    for name in MEMBERS:
        view = View(identifiers, name)
        view.members = MEMBERS
        shares[name] = set(view.share())
    for stretch in range(40):
        assert sum(stretch in share for share in shares.values()) == SWEEPERS, stretch
    # A learner that started before some others (it knows fewer) sweeps a superset of its
    # share, so every stretch keeps a sweeper that knows itself to be one.
    for n, name in enumerate(MEMBERS):
        view = View(identifiers, name)
        view.members = [m for k, m in enumerate(MEMBERS) if k % 3 == n % 3 or m == name]
        assert set(view.share()) >= shares[name], name
    # Two members or fewer: each sweeps everything.
    pair = View(identifiers, "a")
    pair.members = ["a", "b"]
    assert pair.share() == list(range(40))


def end_of_epoch(free: range) -> tuple[list[str], Mailbox]:
    """50 stretches, every unit claimed but ``free``, which lie in one stretch."""
    identifiers = ids(50 * PAGE)
    box = box_with_claims([u for p, u in enumerate(identifiers) if p not in free])
    return identifiers, box


def test_after_dry_pages_a_learner_sweeps_only_its_share_then_rests() -> None:
    free = range(20 * PAGE + 500, 20 * PAGE + 510)
    identifiers, box = end_of_epoch(free)
    rested = found = 0
    for name in MEMBERS:
        view = paged(identifiers, name)  # its view is stale: it believes every unit free
        view.members = MEMBERS
        view.jumps = 1
        share = view.share()
        position, listings, keys = view.jump(box, PREFIX)
        if 20 in share:
            assert position in free, name  # its sweep finds them, at the latest
            found += 1
        elif position is None:
            # Dry pages, then its own share, not the whole order (50 pages).
            assert view.resting
            assert listings <= DRY_PAGES + 2 * len(share)
            assert keys < len(identifiers) - len(free)
            assert not view.exhausted()
            assert view.jump(box, PREFIX) == (None, 0, 0)  # resting lists nothing
            view.rebuild(set())  # a scan found units free again: it searches again
            assert not view.resting
            rested += 1
        else:
            assert position in free, name  # a dry page's neighbour happened to show them
    assert found == SWEEPERS
    assert rested >= 3


def test_a_watcher_sweeps_the_share_of_a_learner_that_left() -> None:
    free = range(20 * PAGE + 500, 20 * PAGE + 510)
    identifiers, box = end_of_epoch(free)
    names = [f"gone-{n}" for n in range(6)] + ["me"]
    probe = View(identifiers, "me")
    probe.members = names
    assert 20 not in probe.share()  # the free units are not in the watcher's own share
    for name in names:
        record: dict[str, object] = {"holder": name}
        record["state"] = "finished" if name != "me" else "running"
        record.update({"lease": 60.0, "incarnation": 1, "epoch": 0})
        box.put(LEASES_PREFIX + name, encode_record(record))
    watch = IdleWatch(
        box, RunLayout(0), "me", 1, LeaseWatcher(box, LEASES_PREFIX, duration=60.0), 20.0
    )
    watch.mark()
    poll = watch.poll()
    assert sorted(poll.absent) == names[:-1]  # marked on their behalf: they left
    assert poll.nobody_busy
    view = paged(identifiers, "me")
    view.members = names
    view.resting = True
    stretches = sorted({s for name in poll.absent for s in view.share(name)})
    assert 20 in stretches
    position, _, _ = view.sweep(box, PREFIX, stretches)
    assert not view.resting
    # Nobody walks the run (its learners left): the watcher takes all of it, from its last
    # unit back, where a learner walking it from the front would meet it.
    assert walk(view, position) == list(reversed(free))


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
    for n in range(12):
        view = paged(identifiers, f"learner-{n}")
        view.jumps = 1
        for block in range(0, len(identifiers), 200):
            view.taken[block : block + 100] = b"\x01" * 100  # 40 runs believed free
        position, listings, keys = view.jump(box, PREFIX)
        assert position in free, n
        assert listings <= full_listing + 2, n
        assert keys <= len(identifiers) + 2 * PAGE, n


def test_a_resting_learner_looks_a_page_further_each_time_and_shares_a_long_run() -> None:
    """Runs still long elsewhere when a learner rests are found a page at a time, and
    entered in their middle half; a short run is left to the learner walking into it, and
    the looks stop after one listing of the order."""
    long_run = range(30 * PAGE + 200, 30 * PAGE + 300)
    short_run = range(10 * PAGE + 5, 10 * PAGE + 7)
    identifiers = ids(50 * PAGE)
    free = set(long_run) | set(short_run)
    box = box_with_claims([u for p, u in enumerate(identifiers) if p not in free])
    for n in range(6):
        view = paged(identifiers, f"learner-{n}")
        view.resting = True
        view.look_from = n * 9 * PAGE  # as jump() draws it when the rest begins
        looks = 0
        while True:
            position, listings, _ = view.look(box, PREFIX)
            looks += 1
            assert listings == 1
            if position is not None:
                break
            assert looks <= 51, n
        assert long_run[0] + 25 <= position < long_run[0] + 75, n  # the middle half
        assert not view.resting
        assert view.candidate() == position
    # Nothing long is left: a resting learner looks at most one listing's worth, then stops.
    box2 = box_with_claims([u for p, u in enumerate(identifiers) if p not in short_run])
    view = paged(identifiers, "tired")
    view.resting = True
    pages = [view.look(box2, PREFIX)[1] for _ in range(60)]
    assert 50 <= sum(pages) <= 51
    assert view.resting
    assert view.look(box2, PREFIX) == (None, 0, 0)
    view.rebuild(set())  # a scan found units free again: it searches (and looks) afresh
    assert not view.resting
