"""Former home of the pieces the patterns share; kept so that existing imports still work.

The pieces now live in one module per concern:

* claims: :mod:`gradientmail.patterns.claims`;
* carried errors, the handoff buffer and worker threads: :mod:`gradientmail.patterns.workers`;
* counters and latencies: :mod:`gradientmail.patterns.stats`;
* ``WorkerError``: :mod:`gradientmail.errors`.
"""

from __future__ import annotations

from gradientmail.errors import WorkerError
from gradientmail.patterns.claims import (
    ClaimRecord,
    claim,
    claim_body,
    new_token,
    parse_claim,
    read_claim,
)
from gradientmail.patterns.stats import Latencies, Stats
from gradientmail.patterns.workers import CarriedError, HandoffBuffer

__all__ = [
    "CarriedError",
    "ClaimRecord",
    "HandoffBuffer",
    "Latencies",
    "Stats",
    "WorkerError",
    "claim",
    "claim_body",
    "new_token",
    "parse_claim",
    "read_claim",
]
