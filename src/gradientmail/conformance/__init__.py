"""The conformance suite: proves a store is safe to coordinate on, or shows why not.

Two front ends run the same properties (:mod:`gradientmail.conformance.properties`):

* ``gradientmail conformance URL``: a report, one line per property, and a verdict
  (:mod:`gradientmail.conformance.cli`);
* :class:`MailboxConformance`: a pytest base class a third party subclasses, supplying a
  ``mailbox`` fixture (:mod:`gradientmail.conformance.testing`; imports pytest).

Programmatic use: ``run_suite(from_url(url), SuiteOptions(quick=True))`` returns a
:class:`SuiteReport`. The race machinery is :mod:`gradientmail.conformance.races`, and
deliberately broken stores that the suite must fail live in
:mod:`gradientmail.conformance.fakes`.
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
from gradientmail.conformance.runner import Outcome, Result, SuiteReport, run_property, run_suite

if TYPE_CHECKING:
    from gradientmail.conformance.testing import MailboxConformance

__all__ = [
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
    "cas_counter",
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
