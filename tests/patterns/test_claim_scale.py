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
    assert counts.total("create", "idle") == LEARNERS
    # One leader lists done/ to confirm the end and records it; the others read the record.
    assert counts.total("create", "complete") == 1
    confirms = 3 * math.ceil(UNITS / PAGE)  # the leader's, and room for two stand-ins
    assert counts.total("list_page", "done") <= 2 * LEARNERS + confirms


@pytest.mark.xfail(
    strict=True,
    reason="the issue's goals at 256 x 100k do not hold yet at 64 x 5k: about 3.5 % of creates "
    "are lost (goal 2 %) and listing pages beyond two full listings are about 0.25 per unit "
    "(goal 0.02), in good part fixed per-learner costs that 78 units per learner cannot "
    "amortize; this test turns green when they do",
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
