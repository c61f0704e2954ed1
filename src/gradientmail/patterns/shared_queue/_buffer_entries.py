"""What a ``shared_queue`` loader puts into its buffer between items.

The consumer side tells them from items by their base class, :class:`Control`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gradientmail._errors import LeaseLostError
    from gradientmail.patterns._workers import CarriedError
    from gradientmail.patterns.shared_queue._unit_claims import Held

__all__ = ["Control", "Exhausted", "Failed", "Fenced", "UnitEnd", "UnitStart", "Wake"]


class Control:
    """Base of the entries the loader puts between items."""

    __slots__ = ()


class UnitStart(Control):
    """The next items belong to ``held``."""

    __slots__ = ("held",)

    def __init__(self, held: Held) -> None:
        self.held = held


class UnitEnd(Control):
    """Every item of ``held`` was put before this entry."""

    __slots__ = ("held", "items")

    def __init__(self, held: Held, items: int) -> None:
        self.held = held
        self.items = items


class Failed(Control):
    """The loader failed; the consumer raises this after the items before it."""

    __slots__ = ("carried", "context")

    def __init__(self, carried: CarriedError, context: str) -> None:
        self.carried = carried
        self.context = context


class Fenced(Control):
    """The learner lost its lease; the consumer raises ``error`` itself."""

    __slots__ = ("error",)

    def __init__(self, error: LeaseLostError) -> None:
        self.error = error


class Wake(Control):
    """Nothing to deliver: wakes the consumer to look at errors raised elsewhere."""

    __slots__ = ()


class Exhausted(Control):
    """Every unit is done (or, without compare-and-swap, claimed)."""

    __slots__ = ()
