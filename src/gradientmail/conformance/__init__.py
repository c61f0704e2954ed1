"""The conformance suite: proves a store is safe to coordinate on, or shows why not.

Two front ends run the same properties (:data:`PROPERTIES`):

* ``gradientmail conformance URL``: a report, one line per property, and a verdict, PASS,
  FAIL or INCONCLUSIVE, each with its own exit status (:data:`EXIT_STATUS`), running
  :func:`check_store`;
* :class:`MailboxConformance`: a pytest base class a third party subclasses, supplying a
  ``mailbox`` fixture (importing it imports pytest).

Programmatic use: ``run_suite(from_url(url), SuiteOptions(quick=True))`` returns a
:class:`SuiteReport`. The races themselves are :func:`race_put_if_absent` (one report with
the bound a clean race proves), :func:`race_winners` (the keys each racer won) and
:func:`cas_counter` (lost increments under compare-and-swap). The deliberately broken
stores ``check-then-write://`` and ``ignore-preconditions://`` ship with the suite, which
must fail them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gradientmail.conformance._context import (
    Property,
    PropertyFailed,
    PropertySkipped,
    SuiteOptions,
)
from gradientmail.conformance._properties import PROPERTIES
from gradientmail.conformance._races import (
    CounterReport,
    RaceReport,
    cas_counter,
    race_put_if_absent,
    race_winners,
)
from gradientmail.conformance._report import EXIT_STATUS, Outcome, Result, SuiteReport, Verdict
from gradientmail.conformance._runner import check_store, run_property, run_suite

if TYPE_CHECKING:
    from gradientmail.conformance._testing import MailboxConformance

__all__ = [
    "EXIT_STATUS",
    "PROPERTIES",
    "CounterReport",
    "MailboxConformance",
    "Outcome",
    "Property",
    "PropertyFailed",
    "PropertySkipped",
    "RaceReport",
    "Result",
    "SuiteOptions",
    "SuiteReport",
    "Verdict",
    "cas_counter",
    "check_store",
    "race_put_if_absent",
    "race_winners",
    "run_property",
    "run_suite",
]


def __getattr__(name: str) -> Any:
    # The pytest base class imports pytest, which the CLI must not need.
    if name == "MailboxConformance":
        from gradientmail.conformance._testing import MailboxConformance

        return MailboxConformance
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
