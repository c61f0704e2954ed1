"""The conformance suite: proves a store is safe to coordinate on, or shows why not.

Two front ends run the same properties (:mod:`gradientmail.conformance.properties`,
written in the framework of :mod:`gradientmail.conformance.context`):

* ``gradientmail conformance URL``: a report, one line per property, and a verdict, PASS,
  FAIL or INCONCLUSIVE, each with its own exit status (:mod:`gradientmail.cli.conformance`,
  running :func:`check_store`);
* :class:`MailboxConformance`: a pytest base class a third party subclasses, supplying a
  ``mailbox`` fixture (:mod:`gradientmail.conformance.testing`; imports pytest).

Programmatic use: ``run_suite(from_url(url), SuiteOptions(quick=True))`` returns a
:class:`SuiteReport` (:mod:`gradientmail.conformance.report`). The race machinery is
:mod:`gradientmail.conformance.races`; what a clean race proves is
:mod:`gradientmail.conformance.power`, and how races are sized for a bound
:mod:`gradientmail.conformance.plan`. Deliberately broken stores that the suite must fail
live in :mod:`gradientmail.conformance.fakes`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gradientmail.conformance.context import (
    Property,
    PropertyFailed,
    PropertySkipped,
    SuiteOptions,
)
from gradientmail.conformance.properties import PROPERTIES
from gradientmail.conformance.races import (
    CounterReport,
    RaceReport,
    cas_counter,
    race_put_if_absent,
)
from gradientmail.conformance.report import EXIT_STATUS, Outcome, Result, SuiteReport, Verdict
from gradientmail.conformance.runner import check_store, run_property, run_suite

if TYPE_CHECKING:
    from gradientmail.conformance.testing import MailboxConformance

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
    "run_property",
    "run_suite",
]


def __getattr__(name: str) -> Any:
    # The pytest base class imports pytest, which the CLI must not need.
    if name == "MailboxConformance":
        from gradientmail.conformance.testing import MailboxConformance

        return MailboxConformance
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
