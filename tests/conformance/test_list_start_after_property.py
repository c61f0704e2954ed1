"""The ``list-start-after`` property has teeth: it fails stores that get partial listings wrong.

Each store below declares ``Capability.LIST_START_AFTER`` and breaks it one way: ignoring
the start point (the shipped fake), starting at it instead of after it (an inclusive start
left as it is), or losing one key where the listing turns a page. The suite must report
FAIL, through both front ends, with a counterexample naming the start point; a store that
does not declare the capability gets SKIP with the reason.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import ClassVar

import pytest

from gradientmail import Capability
from gradientmail.backends.memory import MemoryMailbox
from gradientmail.conformance import (
    PROPERTIES,
    MailboxConformance,
    Outcome,
    SuiteOptions,
    run_property,
    run_suite,
)
from gradientmail.conformance._fakes import IgnoreStartAfterMailbox
from gradientmail.conformance._properties import LISTING_PAGE, property_named

PROPERTY = property_named("list-start-after")


class InclusiveStartMailbox(MemoryMailbox):
    """Starts *at* ``start_after``: an existing start key comes back first."""

    def _iter_keys_after(self, prefix: str, start_after: str) -> Iterator[str]:
        return (k for k in self._iter_keys(prefix) if k >= start_after)


class LosesAKeyAtThePageEndMailbox(MemoryMailbox):
    """Right on a first page, but the first key of the next page is lost."""

    def _iter_keys_after(self, prefix: str, start_after: str) -> Iterator[str]:
        keys = super()._iter_keys_after(prefix, start_after)
        return (k for i, k in enumerate(keys) if i != LISTING_PAGE)


class FiltersWithoutDeclaringMailbox(MemoryMailbox):
    """Correct, but declares no native start: the property does not apply."""

    capabilities: ClassVar[frozenset[Capability]] = frozenset({Capability.ATOMIC_CREATE})

    def _iter_keys_after(self, prefix: str, start_after: str) -> Iterator[str]:
        return (k for k in self._iter_keys(prefix) if k > start_after)


def test_a_store_ignoring_start_after_fails_with_a_shrunk_counterexample() -> None:
    result = run_property(PROPERTY, IgnoreStartAfterMailbox("ignores"), SuiteOptions(seed=7))
    assert result.outcome is Outcome.FAIL
    first = result.detail.splitlines()[0]
    assert "start_after=" in first
    assert "keys at or before start_after returned" in first
    assert "Failing test case" in result.detail  # hypothesis's shrunk example follows


def test_an_inclusive_start_fails() -> None:
    result = run_property(PROPERTY, InclusiveStartMailbox("inclusive"), SuiteOptions(seed=7))
    assert result.outcome is Outcome.FAIL
    assert "(an existing key)" in result.detail
    assert "keys at or before start_after returned" in result.detail


def test_a_key_lost_at_a_page_end_fails_in_the_page_case() -> None:
    """Drawn key sets are far smaller than a page: only the deterministic case sees this."""
    result = run_property(PROPERTY, LosesAKeyAtThePageEndMailbox("pages"), SuiteOptions(seed=7))
    assert result.outcome is Outcome.FAIL
    assert "(the first key: the rest fill one page and spill into the next)" in result.detail
    assert f"at #{LISTING_PAGE} it returned" in result.detail


def test_a_correct_store_passes() -> None:
    result = run_property(PROPERTY, MemoryMailbox("correct"), SuiteOptions(seed=7))
    assert result.outcome is Outcome.PASS, result.detail


def test_a_store_without_the_capability_is_skipped_with_the_reason() -> None:
    result = run_property(PROPERTY, FiltersWithoutDeclaringMailbox("filters"), SuiteOptions())
    assert result.outcome is Outcome.SKIP
    assert "Capability.LIST_START_AFTER" in result.detail


def test_the_whole_suite_names_it_and_only_it() -> None:
    listings = [p for p in PROPERTIES if p.name.startswith("list")]
    report = run_suite(IgnoreStartAfterMailbox("suite"), SuiteOptions(seed=3), properties=listings)
    outcomes = {r.prop.name: r.outcome for r in report.results}
    assert outcomes.pop("list-start-after") is Outcome.FAIL
    assert set(outcomes.values()) == {Outcome.PASS}, outcomes
    assert not report.ok


def test_the_pytest_base_class_fails_it() -> None:
    suite = MailboxConformance()
    request = SimpleNamespace(node=SimpleNamespace(user_properties=[]))
    with pytest.raises(pytest.fail.Exception, match=r"(?s)list-start-after failed.*start_after"):
        suite.test_list_start_after(IgnoreStartAfterMailbox("base"), request)  # type: ignore[attr-defined]
