"""``shared_queue(wait_for_others=False)``: a learner leaves as soon as no unit is free.

Lockstep training needs it: a rank that waits for the units another rank holds, while that
rank waits for it in a collective, would deadlock.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from gradientmail import ConfigurationError
from gradientmail.patterns.shared_queue import shared_queue
from tests.support.queue_claims import two_items
from tests.support.rigs import Rig

UNITS = {f"u{i}": i for i in range(6)}


def test_it_leaves_while_another_learner_still_holds_a_unit(rig_file: Rig) -> None:
    box = rig_file.fresh()
    holding, release = threading.Event(), threading.Event()
    seen: dict[str, list[Any]] = {"holder": [], "leaver": []}
    stats: dict[str, Any] = {}

    def holder() -> None:
        with shared_queue(
            UNITS, mailbox=box, learner_id="holder", load=two_items, prefetch=1
        ) as items:
            for item in items:
                seen["holder"].append(item)
                if len(seen["holder"]) == 1:
                    holding.set()
                    release.wait(timeout=60)  # hold this unit until the leaver has left

    def leaver() -> None:
        with shared_queue(
            UNITS, mailbox=box, learner_id="leaver", load=two_items, wait_for_others=False
        ) as items:
            seen["leaver"].extend(items)
            stats["leaver"] = items.stats.snapshot()

    first = threading.Thread(target=holder)
    first.start()
    assert holding.wait(timeout=60)
    second = threading.Thread(target=leaver)
    second.start()
    second.join(timeout=20)  # it needs well under a second; a waiting learner never ends
    left_in_time = not second.is_alive()
    release.set()
    first.join(timeout=60)
    second.join(timeout=60)
    assert left_in_time, "the learner waited for the unit another learner held"
    assert not stats["leaver"].run_complete  # it did not see the end of the run
    # Still every item exactly once: the holder finished its own unit.
    delivered = sorted(seen["holder"] + seen["leaver"])
    assert delivered == sorted(item for unit in UNITS.values() for item in two_items(unit))
    assert sorted(key.split("/")[-1] for key in box.list("done/")) == sorted(UNITS)


def test_it_still_takes_released_units(rig_file: Rig) -> None:
    box = rig_file.fresh()
    with shared_queue(UNITS, mailbox=box, learner_id="quitter", load=two_items) as items:
        next(items)  # holds a unit (and prefetched more), then leaves early: released
    with shared_queue(
        UNITS, mailbox=box, learner_id="finisher", load=two_items, wait_for_others=False
    ) as items:
        got = list(items)
        assert items.stats.run_complete
    assert sorted(got) == sorted(item for unit in UNITS.values() for item in two_items(unit))


def test_it_must_be_a_bool(rig_file: Rig) -> None:
    with (
        pytest.raises(ConfigurationError, match="wait_for_others"),
        shared_queue(
            UNITS,
            mailbox=rig_file.fresh(),
            learner_id="x",
            load=two_items,
            wait_for_others=0,  # type: ignore[arg-type]  # an int on purpose
        ),
    ):
        pass
