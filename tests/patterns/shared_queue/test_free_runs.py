"""The runs of units a learner believes free: finding them, drawing one, and pages."""

from __future__ import annotations

import uuid

from gradientmail import from_url
from gradientmail._counting import Counting, RequestTally
from gradientmail.patterns.shared_queue._claim_pages import ClaimPages
from gradientmail.patterns.shared_queue._policy.free_runs import PAGE, FreeRuns
from gradientmail.patterns.shared_queue._stats import QueueCost


def ids(n: int) -> list[str]:
    return [f"u{i:05d}" for i in range(n)]


def runs_of(n: int) -> FreeRuns:
    return FreeRuns(ids(n), b"seed")


def test_runs_are_cut_to_the_stretch_asked_for() -> None:
    view = runs_of(20)
    for p in (0, 1, 5, 6, 7, 12, 19):
        view.taken[p] = 1
    assert view.runs() == [(2, 3), (8, 4), (13, 6)]
    assert view.runs(3, 10) == [(3, 2), (8, 3)]
    assert view.runs(6, 7) == []
    assert view.runs(18, 30) == [(18, 1)]
    assert view.pick_run(shortest=5) == (13, 6)  # the only run of five or more
    assert view.pick_run(within=(0, 4), shortest=4) is None


def test_long_runs_are_drawn_in_proportion_to_the_square_of_their_length() -> None:
    # A jump costs about one lost claim whatever the run's length, and takes about half of
    # it: a long run gives more work per lost claim.
    view = runs_of(13)
    view.taken[10] = 1  # free runs: (0, 10) and (11, 2)
    draws = [view.pick_run() for _ in range(2000)]
    assert set(draws) == {(0, 10), (11, 2)}  # the short run is still drawn sometimes
    # 100 / 104 = 96 % by the square; 10 / 12 = 83 % in proportion to the length alone
    assert 0.93 * 2000 < draws.count((0, 10)) < 0.99 * 2000


def test_the_run_after_a_position_wraps_to_the_front() -> None:
    view = runs_of(20)
    view.taken[:] = b"\x01" * 20
    view.taken[2:4] = b"\x00\x00"
    view.taken[9:15] = b"\x00" * 6
    assert view.run_after(3) == (9, 6)
    assert view.run_after(9) == (10, 5)  # the rest of a run the position is in
    assert view.run_after(14) == (2, 2)  # past the end: from the front
    assert view.run_after(14, shortest=3) == (9, 6)
    assert view.run_after(3, shortest=7) is None


def test_runs_at_the_front_and_at_the_end_of_the_order_are_found() -> None:
    view = runs_of(10)
    view.taken[:] = b"\x01" * 10
    view.taken[0:2] = b"\x00\x00"  # a run at position 0
    view.taken[9] = 0  # a run of one at the last position
    assert view.runs() == [(0, 2), (9, 1)]
    assert view.runs(0, 0) == [(0, 1)]
    assert view.largest_run() == (0, 2)
    assert view.pick_run(shortest=2) == (0, 2)
    assert view.pick_run(within=(0, 1)) == (0, 2)
    assert view.run_after(9) == (0, 2)  # past the end: the run at the front
    assert view.run_after(8) == (9, 1)
    assert view.run_after(0) == (1, 1)  # the rest of the front run
    view.mark(["u00000"])
    assert view.run_after(9) == (1, 1)
    view.mark(["u00009"])
    assert view.runs() == [(1, 1)]


def test_marks_are_only_added_and_a_view_with_none_free_is_exhausted() -> None:
    view = runs_of(5)
    view.mark(["u00001", "u00003", "not-a-unit"])  # identifiers outside the order are ignored
    assert view.runs() == [(0, 1), (2, 1), (4, 1)]
    assert not view.exhausted()
    view.mark(ids(5))
    assert view.exhausted()


def test_a_page_marks_its_claims_and_says_how_far_it_reached() -> None:
    identifiers = ids(3 * PAGE)
    box = from_url(f"memory://runs-{uuid.uuid4().hex}")
    claimed = [p for p in range(len(identifiers)) if p % 2]  # every other unit
    for p in claimed:
        assert box.put_if_absent("units/" + identifiers[p], b"{}")
    tally = RequestTally()
    reader = ClaimPages(Counting(box, tally), "units/")
    assert reader.partial  # memory:// starts listings after a key
    view = FreeRuns(identifiers, b"seed")
    last = view.list_page(reader, 10)
    stats = QueueCost.of(tally.counts())
    assert (stats.listings, stats.listed_keys) == (1, PAGE)
    assert last == 11 + 2 * (PAGE - 1)  # the last of the 1000 claims listed after unit 9
    assert [p for p in range(10, last + 1) if view.taken[p]] == list(range(11, last + 1, 2))
    assert not any(view.taken[:10])
    assert not any(view.taken[last + 1 :])
    last = view.list_page(reader, last + 1)
    assert last == len(identifiers) - 1  # the listing reached the end
    stats = QueueCost.of(tally.counts())
    assert (stats.listings, stats.listed_keys) == (2, len(claimed) - 5)
