"""The end of an epoch is noticed within about a second of its last completion, whatever
the lease.

A learner that finds nothing free waits; its full polls (a page of claims, the idle
markers, the watched leases) back off up to a renewal period, ``lease / 3``, which is 20 s
at a 60 s lease. Between them it reads the epoch's ``complete`` record once a second, and
the learner that finishes last writes that record at once. So a learner that waited long
does not notice the end up to a renewal period late.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from gradientmail import Mailbox
from gradientmail.patterns.shared_queue import shared_queue

#: The slow unit's training time: long enough that a waiter backing off (0.1 s doubling)
#: would next poll at about 12.7 s, 5.7 s after the last completion.
SLOW_S = 7.0
#: The notice bound under test, 1 s plus a round trip, with room for a loaded machine.
BOUND_S = 3.0


@pytest.mark.parametrize("slow", ["a", "b"])
def test_a_learner_waiting_long_notices_the_end_within_the_bound_at_a_60_s_lease(
    box: Mailbox, slow: str
) -> None:
    """One learner trains its unit for SLOW_S seconds, the other waits all that time. Each
    learner is the slow one once, so the one that finishes last is the epoch's leader once
    and not the other time."""
    slow_began = threading.Event()
    last_item_at: list[float] = []
    ended_at: dict[str, float] = {}
    errors: list[BaseException] = []

    def learner(name: str) -> None:
        def load(unit: str) -> Iterator[str]:
            if name == slow:
                slow_began.set()
                time.sleep(SLOW_S)  # the unit's cost on this learner, not a synchronisation
            else:  # keep the slow learner from finding no unit left
                assert slow_began.wait(60), "the slow learner never started a unit"
            yield unit

        try:
            with shared_queue(
                {"u0": "u0", "u1": "u1"}, mailbox=box, learner_id=name, load=load, lease=60
            ) as q:
                for _ in q:
                    if name == slow:
                        last_item_at.append(time.monotonic())
            ended_at[name] = time.monotonic()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=learner, args=(name,)) for name in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    assert len(last_item_at) == 1
    assert len(ended_at) == 2
    for name, at in ended_at.items():
        late = at - last_item_at[0]
        assert late <= BOUND_S, f"{name} noticed the end {late:.1f}s after the last item"
