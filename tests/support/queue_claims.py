"""What the shared_queue tests load and read back: a two-item unit, and a learner's claims."""

from __future__ import annotations

from gradientmail import Mailbox
from gradientmail.patterns._claims import parse_claim
from gradientmail.patterns._run_layout import RunLayout


def two_items(unit: int) -> list[tuple[int, int]]:
    """``load`` of a unit of two items, ``(unit, 0)`` and ``(unit, 1)``."""
    return [(unit, 0), (unit, 1)]


def claims_of(box: Mailbox, owner: str, layout: RunLayout | None = None) -> dict[str, str]:
    """Unit -> claim state, for the claims ``owner`` holds in ``layout``'s epoch (0)."""
    layout = layout or RunLayout(0)
    found = {}
    for key in box.list(layout.units):
        record = parse_claim(box.get(key))
        if record is not None and record.owner == owner:
            found[key.removeprefix(layout.units)] = str(record.extra.get("state"))
    return found
