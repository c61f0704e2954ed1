"""What a passing race proves, in numbers: the bound on the double-win rate.

A race property that sees no double winner in ``n`` contested keys (keys that at least two
racers claimed at the same moment) bounds the rate at which the store lets two claimants
win: if a fraction ``p`` of contested keys could go wrong, the chance of seeing none in
``n`` independent keys is ``(1 - p) ** n``. The exact one-sided 95 % upper bound for zero
failures in ``n`` trials (Clopper-Pearson) is the ``p`` where that chance is 5 %::

    p = 1 - 0.05 ** (1 / n)

so 150 contested keys bound the rate at 1.98 %, and 2995 at 0.1 %. What counts is keys,
not requests: a store that goes wrong on some keys (a rare server-side path, one shard out
of many) goes wrong for every racer on that key or for none, so sixteen racers on one key
are one trial, not sixteen.

:func:`double_win_bound` computes the bound, :func:`keys_for_bound` the keys a chosen bound
needs, and :func:`power_statement` the sentence the report prints.
"""

from __future__ import annotations

import math

__all__ = [
    "CONFIDENCE",
    "DEFAULT_BOUND",
    "double_win_bound",
    "keys_for_bound",
    "percent",
    "power_statement",
]

#: The confidence every stated bound has.
CONFIDENCE = 0.95

#: The bound a default (not ``quick``) run sizes its races for: 598 contested keys.
DEFAULT_BOUND = 0.005


def double_win_bound(contested: int, confidence: float = CONFIDENCE) -> float:
    """The exact one-sided upper bound on the double-win rate after ``contested`` clean keys.

    ``1 - (1 - confidence) ** (1 / contested)``; 1.0 (no bound at all) for zero keys.
    """
    if contested <= 0:
        return 1.0
    return 1.0 - math.pow(1.0 - confidence, 1.0 / contested)


def keys_for_bound(bound: float, confidence: float = CONFIDENCE) -> int:
    """The fewest contested keys whose clean race bounds the double-win rate by ``bound``.

    Raises:
        ValueError: ``bound`` is not strictly between 0 and 1.
    """
    if not 0.0 < bound < 1.0:
        raise ValueError(f"a bound must be strictly between 0 and 1, not {bound!r}")
    keys = max(1, math.ceil(math.log(1.0 - confidence) / math.log(1.0 - bound)))
    # Floating point can land one key either side of the exact answer: settle it directly.
    while double_win_bound(keys, confidence) > bound:
        keys += 1
    while keys > 1 and double_win_bound(keys - 1, confidence) <= bound:
        keys -= 1
    return keys


def percent(fraction: float) -> str:
    """``fraction`` as a percentage to three significant digits: ``0.0193 -> '1.93 %'``."""
    return f"{fraction * 100:.3g} %"


def power_statement(contested: int) -> str:
    """The sentence a clean race prints: its contested keys and the bound they give."""
    if contested <= 0:
        return "no key was contested, so this bounds nothing"
    return (
        f"0 double winners in {contested} contested keys: a store that lets two claimants "
        f"win on more than {percent(double_win_bound(contested))} of contested keys would "
        f"have failed with {CONFIDENCE * 100:.0f} % confidence"
    )
