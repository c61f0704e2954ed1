"""Former home of ``gradientmail race``: see :mod:`gradientmail.cli.race`.

``race(box, racers, keys)`` is :func:`gradientmail.conformance.races.race_winners`.
"""

from __future__ import annotations

from gradientmail.cli.race import add_arguments, run
from gradientmail.conformance.races import race_winners as race

__all__ = ["add_arguments", "race", "run"]
