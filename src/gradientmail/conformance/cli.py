"""Former home of ``gradientmail conformance``: see :mod:`gradientmail.cli.conformance`.

``below`` now lives in :mod:`gradientmail.conformance.workspace`.
"""

from __future__ import annotations

from gradientmail.cli.conformance import add_arguments, main, run
from gradientmail.conformance.workspace import below

__all__ = ["add_arguments", "below", "main", "run"]
