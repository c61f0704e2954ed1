"""Claim cost at scale, counted: requests per unit stay bounded with many learners.

64 learner threads share 5000 units on ``memory://``, each through its own
:class:`~gradientmail.testing.LatencyMailbox` (no latency: it only counts). Request counts
are deterministic enough to assert where times are not; ``benchmarks/scale.py`` measures the
same figures with latency, in several processes, for up to 1024 learners.
"""

from __future__ import annotations

import math
import threading
import uuid
from collections import Counter

import pytest

from gradientmail import from_url
from gradientmail.patterns.shared_queue import shared_queue
from gradientmail.testing import NO_LATENCY, LatencyMailbox, RequestCounts

LEARNERS = 64
UNITS = 5000
PAGE = 1000


def run_64_learners() -> tuple[Counter[int], list[LatencyMailbox]]:
    """64 learner threads over 5000 units of two items each; what was delivered, the boxes."""
    name = f"claim-scale-{uuid.uuid4().hex}"
    units = {f"u{i:05d}": i for i in range(UNITS)}
    boxes = [LatencyMailbox(from_url(f"memory://{name}"), NO_LATENCY) for _ in range(LEARNERS)]
    delivered: Counter[int] = Counter()
    lock = threading.Lock()
    errors: list[BaseException] = []
    barrier = threading.Barrier(LEARNERS)

    def learner(n: int) -> None:
        barrier.wait()
        try:
            with shared_queue(
                units, mailbox=boxes[n], learner_id=f"learner-{n:02d}", load=lambda u: (u, u)
            ) as items:
                for item in items:
                    with lock:
                        delivered[item] += 1
        except BaseException as exc:  # noqa: BLE001 - asserted below
            errors.append(exc)

    threads = [threading.Thread(target=learner, args=(n,)) for n in range(LEARNERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads)
    assert not errors, errors[0]
    return delivered, boxes


def test_64_learners_deliver_each_of_5000_units_exactly_once() -> None:
    delivered, boxes = run_64_learners()
    assert delivered == Counter(dict.fromkeys(range(UNITS), 2))
    # Every unit's completion is recorded, and nothing else is.
    assert len(list(boxes[0].inner.list("done/"))) == UNITS


def test_waiting_learners_read_no_claim_and_list_the_completions_once() -> None:
    """Waiting costs no claim read and no listing of claims: only the idle markers.

    Every read of a claim is the read-back of a won claim, and each learner lists the
    completions at most twice: when it starts (a learner that starts late lists many), and
    once to confirm the end (no learner dies here, so no claim scan is needed); in fact only
    a leader confirms, and its record ends the epoch for the others.
    """
    delivered, boxes = run_64_learners()
    assert delivered == Counter(dict.fromkeys(range(UNITS), 2))
    counts = sum((box.counts() for box in boxes), RequestCounts())
    reads = counts.total("get", "units") + counts.total("get_versioned", "units")
    assert reads == UNITS
    two_listings = 2 * math.ceil(UNITS / PAGE)  # the start's listing, then the end's
    for box in boxes:
        assert box.counts().total("list_page", "done") <= two_listings
    # One marker per learner, and at most two more: a watcher also writes a marker for a
    # learner it saw leave (``settle``), and a fresh-clone run saw 65 creates of 64 learners.
    assert LEARNERS <= counts.total("create", "idle") <= LEARNERS + 2
    # One leader lists done/ to confirm the end and records it; the others read the record.
    # The last learner to go idle writes it too, at once, without waiting for the leader: the
    # two may race, and put_if_absent lets one win (a CI run saw 2 creates of 64 learners).
    assert 1 <= counts.total("create", "complete") <= 2
    confirms = 3 * math.ceil(UNITS / PAGE)  # the leader's, and room for two stand-ins
    assert counts.total("list_page", "done") <= 2 * LEARNERS + confirms


def test_64_learners_pay_about_a_page_per_lost_claim_never_a_full_listing() -> None:
    """The bound that keeps the claim cost flat: a lost claim costs its create and about
    one page from where the learner jumps, not a listing of every claim (which cost nine
    pages per lost claim here, and grew with the units). Beyond the two full listings a
    learner may make (its start, and one before it concludes that nothing is left), the
    pages on the claims add up to about one per lost claim, and a few per learner at the
    end (pages that show no run worth taking, the sweep of its share, a look while it
    rests); at most two per lost claim and four per learner are allowed."""
    delivered, boxes = run_64_learners()
    assert delivered == Counter(dict.fromkeys(range(UNITS), 2))
    listing = math.ceil(UNITS / PAGE)
    beyond = lost = 0
    for box in boxes:
        counts = box.counts()
        won = counts.total("get_versioned", "units")  # the read-back of each won claim
        lost += counts.total("create", "units") - won
        beyond += max(0, counts.total("list_page", "units") - 2 * listing)
    assert lost > 0  # 64 learners over 5000 units do collide
    assert beyond <= 2 * lost + 4 * LEARNERS, (beyond, lost)


@pytest.mark.xfail(
    strict=True,
    reason="the issue's per-unit goals are set at 256 x 100k (390 units a learner), where "
    "benchmarks/scale.py meets them; at 78 units a learner, per-learner costs do not "
    "amortize: about 3 % of creates are lost (goal 2 %; a learner jumps about "
    "ln(units / (4 x learners)) times, and each jump costs a lost claim where it lands; "
    "and in an order of 5 pages the pages of a jump at the end go round the whole order, "
    "so it walks short runs back from their last units to meet their walkers, a lost claim "
    "each) "
    "and the pages beyond two full listings are about 0.10 per unit (goal 0.02: the "
    "jumps' pages, the leases and the waiting polls, about 8 pages a learner)",
)
def test_64_learners_claim_5000_units_with_a_bounded_number_of_requests() -> None:
    delivered, boxes = run_64_learners()
    assert delivered == Counter(dict.fromkeys(range(UNITS), 2))
    counts = sum((box.counts() for box in boxes), RequestCounts())
    creates = counts.total("create", "units")
    reads = counts.total("get", "units") + counts.total("get_versioned", "units")
    allowance = 2 * math.ceil(UNITS / PAGE)  # a listing at the start, one before the end
    extra_pages = sum(max(0, box.counts().total("list_page") - allowance) for box in boxes)
    lost = creates - UNITS
    print(
        f"creates {creates / UNITS:.3f}/unit (lost {100 * lost / creates:.2f} %), "
        f"claim reads {reads / UNITS:.3f}/unit, extra pages {extra_pages / UNITS:.4f}/unit, "
        f"by operation {counts.by_operation()}"
    )
    assert lost / creates <= 0.02
    assert extra_pages / UNITS <= 0.02
    assert (creates + reads + extra_pages) / UNITS <= 2.1
