"""How hard the statistical stress runs push: CI's share, or the full run.

``make test`` (and so CI) runs every stress test, on every backend, at the CI size: fewer
repetitions or keys where the suite proves the same power elsewhere, each site naming where.
``make stress`` sets ``GM_STRESS=full`` and runs the ``slow`` tests at their full size.
"""

from __future__ import annotations

import os

#: Whether this run asked for the full-size stress runs (``GM_STRESS=full``).
FULL = os.environ.get("GM_STRESS", "") == "full"


def size(ci: int, full: int) -> int:
    """The repetitions (or keys) a stress test runs: ``full`` with ``GM_STRESS=full``."""
    return full if FULL else ci
