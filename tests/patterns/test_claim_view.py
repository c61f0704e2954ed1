"""Where a learner claims next: its start, its jumps, and what a jump may land on.

Deterministic: a view is driven directly against a ``memory://`` mailbox whose claims the
test writes, so each assertion names the exact units a page showed.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from gradientmail import Capability, Mailbox, from_url
from gradientmail.patterns.claim_view import PAGE, SHORT_RUN, View, lists_from_a_key
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


def test_runs_are_cut_to_the_stretch_asked_for() -> None:
    view = View(ids(20), "l0")
    for p in (0, 1, 5, 6, 7, 12, 19):
        view.taken[p] = 1
    assert view.runs() == [(2, 3), (8, 4), (13, 6)]
    assert view.runs(3, 10) == [(3, 2), (8, 3)]
    assert view.runs(6, 7) == []
    assert view.runs(18, 30) == [(18, 1)]
    assert view.pick_run(shortest=5) == (13, 6)  # the only run of five or more
    assert view.pick_run(within=(0, 4), shortest=4) is None


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
    position, _, _ = view.jump(box, PREFIX)
    assert position == 52  # the walker coming from 50 reaches it last


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
    assert listings <= 3  # it looks for a long run first: three pages hold every claim
    assert position in free
    taken = [position]
    while True:  # claim, then walk on without another page
        assert position is not None
        view.taken[position] = 1
        view.next = position + 1
        position = view.candidate()
        if position is None:
            break
        taken.append(position)
    assert taken == [p for p in free if taken[0] <= p <= view.sparse_until]
    assert view.sparse_until >= 999  # the first page: 1000 claims and the free units among them
