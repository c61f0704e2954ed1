"""The conformance suite as a pytest base class, for a third party's own test run.

Subclass :class:`MailboxConformance` in a test module and supply one fixture, ``mailbox``,
returning a fresh mailbox (a new prefix or directory per test)::

    import pytest
    from gradientmail import from_url
    from gradientmail.conformance import MailboxConformance

    class TestMyStore(MailboxConformance):
        @pytest.fixture
        def mailbox(self):
            return from_url(f"mystore://bucket/test-{uuid.uuid4().hex}")

Every property becomes one test, ``test_<name>`` (``test_race_threads``, ...), running the
same check as ``gradientmail conformance URL``. A property whose capability the mailbox does
not declare (``mailbox.supports(Capability.X)``) is SKIPPED with the reason; it never passes
silently. A failure shows the counterexample and the seed; set ``conformance_options =
SuiteOptions(seed=S)`` on the class to replay it.

A passing race test states what it proves: its summary (shown by ``pytest -rP``) names the
contested keys and the bound on the double-win rate, and the same two figures are recorded
as the test's ``user_properties`` ``contested_keys`` and ``double_win_bound`` (in JUnit
XML, for instance). ``SuiteOptions(bound=0.001)`` sizes each race test for that bound.
"""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from gradientmail.conformance._context import Property, SuiteOptions
from gradientmail.conformance._properties import PROPERTIES
from gradientmail.conformance._report import Outcome
from gradientmail.conformance._runner import resolve_seed, run_property
from gradientmail.mailbox import Mailbox

__all__ = ["MailboxConformance"]


def _make_test(prop: Property) -> Any:
    def test(self: MailboxConformance, mailbox: Mailbox, request: pytest.FixtureRequest) -> None:
        options = resolve_seed(self.conformance_options)
        result = run_property(prop, mailbox, options)
        if result.bound is not None:
            # What the clean races prove, where pytest keeps per-test figures (JUnit XML
            # <property> elements, hooks) and in the captured output (pytest -rP).
            request.node.user_properties.append(("contested_keys", result.contested))
            request.node.user_properties.append(("double_win_bound", result.bound))
            print(f"{prop.name}: {result.detail}")
        if result.outcome is Outcome.SKIP:
            pytest.skip(f"{prop.name}: {result.detail}")
        if result.outcome is Outcome.INCONCLUSIVE:
            pytest.skip(f"{prop.name}: INCONCLUSIVE, not tested: {result.detail}")
        if result.outcome is Outcome.FAIL:
            pytest.fail(
                f"{prop.name} failed ({prop.protects}):\n{result.detail}\n"
                f"replay: conformance_options = SuiteOptions(seed={options.seed})",
                pytrace=False,
            )

    test.__name__ = f"test_{prop.name.replace('-', '_')}"
    test.__doc__ = prop.check.__doc__
    return test


class MailboxConformance:
    """Base class: one test per conformance property. Subclass it and define ``mailbox``.

    Attributes:
        conformance_options: how hard to push (threads, processes, seed, quick). The
            default is the CLI's ``--quick`` run, which still races for real.
    """

    conformance_options: ClassVar[SuiteOptions] = SuiteOptions(quick=True)

    @pytest.fixture
    def mailbox(self) -> Mailbox:
        """Override in the subclass: return a fresh, empty mailbox on the store under test."""
        pytest.fail(
            f"{type(self).__name__} must define a `mailbox` fixture returning a fresh "
            "mailbox, e.g. `@pytest.fixture\\n def mailbox(self): return from_url(...)`",
            pytrace=False,
        )


for _prop in PROPERTIES:
    _test = _make_test(_prop)
    setattr(MailboxConformance, _test.__name__, _test)
del _prop, _test
