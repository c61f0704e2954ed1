"""A ``shared_queue`` learner's preference order over the units of one epoch.

A learner tries free units in this order (see :mod:`gradientmail.patterns.shared_queue._loader`):

* by default, the mapping's order;
* with ``order=``, the identifiers it names first, then the rest in mapping order;
* with ``shuffle=seed``, a permutation drawn from ``(seed, epoch)``: the same on every
  learner, different in each epoch.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from typing import Any

from gradientmail._errors import ConfigurationError
from gradientmail._keys import validate_segments

__all__ = ["preference_order"]


def preference_order(
    units: Mapping[str, Any], order: Iterable[str] | None, shuffle: int | None, epoch: int
) -> list[str]:
    """Every identifier of ``units`` once, in the order this learner tries them.

    Raises:
        InvalidKeyError: an identifier is not a valid key segment.
        ConfigurationError: both ``order`` and ``shuffle``; ``order`` is a string, names an
            identifier that is not in ``units``, or names one twice.
    """
    identifiers = validate_segments(units, "unit identifier")
    if shuffle is not None:
        if order is not None:
            raise ConfigurationError(
                "give order= or shuffle=, not both: shuffle draws every learner's order"
            )
        random.Random(f"{shuffle}:{epoch}").shuffle(identifiers)
        return identifiers
    if order is None:
        return identifiers
    if isinstance(order, str):
        raise ConfigurationError(
            f"order must be a sequence of unit identifiers, not the string {order!r}"
        )
    if not isinstance(order, Iterable):
        raise ConfigurationError(
            f"order must be a sequence of unit identifiers (a list or tuple), not "
            f"{type(order).__name__} {order!r}"
        )
    preferred: list[str] = []
    seen: set[str] = set()
    for ident in order:
        if not isinstance(ident, str) or ident not in units:
            raise ConfigurationError(
                f"order names {ident!r}, which is not a key of units; order is a preference "
                "over the same identifiers as units"
            )
        if ident in seen:
            raise ConfigurationError(f"order names {ident!r} more than once")
        seen.add(ident)
        preferred.append(ident)
    preferred.extend(ident for ident in identifiers if ident not in seen)
    return preferred
