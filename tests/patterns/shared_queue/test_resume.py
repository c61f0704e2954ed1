"""A learner restarted under its id takes back its earlier incarnation's units first.

Its unfinished units were half trained there, and no other learner may take them while
their owner's id is alive again: so the restart takes them back before it claims a free
unit, whether the earlier incarnation released them (it left early) or died holding them.
These run in one process, on ``memory://`` and ``file://``; ``test_lifecycle.py`` kills a
learner process for real.
"""

from __future__ import annotations

from typing import Any

import pytest

from gradientmail import Mailbox
from gradientmail.patterns._leases import Lease
from gradientmail.patterns._run_layout import LEASES_PREFIX, RunLayout
from gradientmail.patterns.shared_queue import shared_queue
from gradientmail.patterns.shared_queue._unit_claims import UnitClaims
from tests.support.delegating import Delegating
from tests.support.queue_claims import claims_of, two_items

UNITS = {f"u{i}": i for i in range(8)}
LAYOUT = RunLayout(0)


@pytest.fixture
def box(local_box: Mailbox) -> Mailbox:
    """``memory://`` and ``file://``: resuming is gradientmail's own."""
    return local_box


def test_a_learner_restarted_after_leaving_early_takes_back_what_it_released_first(
    box: Mailbox,
) -> None:
    with shared_queue(UNITS, mailbox=box, learner_id="node", load=two_items, prefetch=2) as q:
        next(q)  # one item of its first unit; the loader has prefetched more
    released = claims_of(box, "node")
    assert released, "it held units when it left"
    assert set(released.values()) == {"released"}
    with shared_queue(UNITS, mailbox=box, learner_id="node", load=two_items, prefetch=1) as q:
        order = list(dict.fromkeys(f"u{unit}" for unit, _ in q))
    assert set(order[: len(released)]) == set(released), (order, released)
    assert sorted(order) == sorted(UNITS)


class ClaimWrites(Delegating):
    """Notes each write to a claim, in order: ``("create", id)`` or ``("swap", id)``."""

    def __init__(self, inner: Mailbox) -> None:
        super().__init__(inner)
        self.writes: list[tuple[str, str]] = []

    def put_if_absent(self, key: str, data: Any) -> bool:
        if key.startswith(LAYOUT.units):
            self.writes.append(("create", key.removeprefix(LAYOUT.units)))
        return bool(self.inner.put_if_absent(key, data))

    def put_if_match(self, key: str, *args: Any, **kwargs: Any) -> Any:
        if key.startswith(LAYOUT.units):
            self.writes.append(("swap", key.removeprefix(LAYOUT.units)))
        return self.inner.put_if_match(key, *args, **kwargs)


def test_a_learner_restarted_after_dying_takes_its_units_back_before_claiming_a_free_one(
    box: Mailbox,
) -> None:
    """The earlier incarnation died holding u5 and u2, and its exit wrote ``failed``: its
    claims still read ``claimed``. The restart's first claim writes are the swaps that take
    those two back (in its order of preference); it creates no claim before them."""
    earlier = Lease(box, LEASES_PREFIX + "node", "node", duration=60.0, extra={"epoch": 0})
    earlier.acquire()
    died = UnitClaims(box, LAYOUT, "node", earlier.incarnation)
    for unit in ("u5", "u2"):
        assert died.claim(unit) is not None
    earlier.end("failed")
    writes = ClaimWrites(box)
    with shared_queue(
        UNITS,
        mailbox=writes,  # type: ignore[arg-type]
        learner_id="node",
        load=two_items,
        prefetch=1,
    ) as q:
        got = list(q)
    assert [w for w in writes.writes if w[0] == "swap"][:2] == [("swap", "u2"), ("swap", "u5")]
    first_create = next(n for n, w in enumerate(writes.writes) if w[0] == "create")
    assert {("swap", "u2"), ("swap", "u5")} <= set(writes.writes[:first_create]), writes.writes
    assert sorted(got) == sorted(item for unit in UNITS.values() for item in two_items(unit))
    assert set(claims_of(box, "node").values()) == {"done"}
