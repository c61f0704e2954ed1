"""Former home of ``gradientmail conformance``: see :mod:`gradientmail.cli.conformance`."""

from __future__ import annotations

from gradientmail.cli.conformance import add_arguments, below, main, run

__all__ = ["add_arguments", "below", "main", "run"]
