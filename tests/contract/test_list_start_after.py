"""Partial listings, ``list(prefix, start_after=k)``, on every backend through ``box``/``rig``.

Every backend accepts ``start_after`` and returns exactly the keys of ``list(prefix)``
sorting after it, in the same order: natively where it declares
``Capability.LIST_START_AFTER`` (memory, file, S3, GCS), by filtering the full listing
where it does not (Azure). That the store really starts there (fewer requests) is tested
per backend in tests/backends/test_partial_listings.py.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gradientmail import Capability, InvalidKeyError, Mailbox
from gradientmail.backends._base import BaseMailbox
from gradientmail.conformance import Outcome, SuiteOptions, run_property
from gradientmail.conformance._properties import property_named
from tests.support.rigs import Rig

#: Backends whose store starts a listing after a given name (the rest filter).
NATIVE = {"memory", "file", "s3", "gcs"}

#: Keys under "p/" that sort differently as bytes, as ASCII and as directory trees, plus
#: neighbours outside the prefix on both sides.
INSIDE = [
    "p/a",
    "p/a b",
    "p/a-b",
    "p/a.b",
    "p/a/b",
    "p/a/b/c",
    "p/a0",
    "p/ab",
    "p/z",
    "p/ÿ",
    "p/é",
    "p/é/x",
    "p/鍵",
    "p/🙂",
    "p/\U0010fffd",
]
OUTSIDE = ["o", "p", "p-", "p.x", "p0", "q", "é"]


@pytest.fixture
def listed(box: Mailbox) -> Mailbox:
    """``box`` holding :data:`INSIDE` and :data:`OUTSIDE`."""
    for key in INSIDE + OUTSIDE:
        box.put(key, b"")
    return box


def _partial(box: Mailbox, prefix: str, start_after: str) -> list[str]:
    return list(box.list(prefix, start_after=start_after))  # type: ignore[call-arg]


def test_inside_keys_list_in_python_string_order(listed: Mailbox) -> None:
    """The premise: the store's order (UTF-8 bytes) is Python's ``str`` order."""
    assert list(listed.list("p/")) == sorted(INSIDE)


@pytest.mark.parametrize(
    "start_after",
    [
        *INSIDE,  # every existing key, the first and the last included
        "p/a/",  # missing, between "p/a.b" and "p/a/b"
        "p/a/b/",  # missing, between "p/a/b" and "p/a/b/c"
        "p/aa",  # missing, between "p/a0" and "p/ab"
        "p/é/",  # missing, a leading part of "p/é/x"
        "p/\U0010ffff",  # past every key under the prefix
        "p/",  # the prefix itself
        "p",  # a key before the prefix
        "o/zzz",  # before the prefix
        "",  # before everything
        "p0",  # after the prefix ('0' sorts after '/')
        "\U0010ffff",  # past every key
    ],
)
def test_partial_listing_is_the_full_listing_after_start_after(
    listed: Mailbox, start_after: str
) -> None:
    full = list(listed.list("p/"))
    assert _partial(listed, "p/", start_after) == [k for k in full if k > start_after]


@pytest.mark.parametrize(
    "start_after",
    [
        "p/a\x00",  # a control character: no key holds one
        "p/a\x7f",
        "p/a\\b",  # a backslash
        "p/é\ud800",  # a lone surrogate: no UTF-8 form at all
        "p/a/" + "z" * 2000,  # longer than any key
        "p/鍵" * 400,  # longer than any key, in 3-byte characters
    ],
)
def test_start_after_may_be_any_str_even_no_key(listed: Mailbox, start_after: str) -> None:
    full = list(listed.list("p/"))
    assert _partial(listed, "p/", start_after) == [k for k in full if k > start_after]


@pytest.mark.parametrize("prefix", ["", "p", "p/a", "p/é", "q"])
def test_other_prefixes(listed: Mailbox, prefix: str) -> None:
    full = list(listed.list(prefix))
    for start_after in ["", "p/a", "p/a/b", "p/é", "o", "p0", "p/"]:
        assert _partial(listed, prefix, start_after) == [k for k in full if k > start_after], (
            start_after
        )


def test_start_after_before_the_prefix_lists_everything(listed: Mailbox) -> None:
    assert _partial(listed, "p/", "o") == sorted(INSIDE)
    assert _partial(listed, "p/", "") == sorted(INSIDE)


def test_a_partial_listing_is_a_lazy_iterator(box: Mailbox) -> None:
    box.put("k1", b"")
    box.put("k2", b"")
    listing = box.list("k", start_after="k1")  # type: ignore[call-arg]
    assert iter(listing) is listing
    box.put("k3", b"")  # not yet fetched: seen
    assert list(listing) == ["k2", "k3"]


@pytest.mark.parametrize("start_after", [1, b"p/a", ["p/a"], 1.5])
def test_start_after_must_be_a_str(box: Mailbox, start_after: object) -> None:
    with pytest.raises(InvalidKeyError, match="start_after must be a key"):
        box.list("", start_after=start_after)  # type: ignore[call-arg]  # raised at the call


@pytest.fixture
def unlistable(box: Mailbox, monkeypatch: pytest.MonkeyPatch) -> Mailbox:
    """``box`` whose listing primitives fail the test if anything reaches them."""
    assert isinstance(box, BaseMailbox)

    def reached(*args: object) -> Iterator[str]:
        raise AssertionError("a listing was started before its arguments were checked")

    monkeypatch.setattr(box, "_iter_keys", reached)
    monkeypatch.setattr(box, "_iter_keys_after", reached)
    return box


@pytest.mark.parametrize("prefix", ["a\nb", "/abs", "a\\b", "\ud800"])
def test_an_invalid_prefix_is_rejected_before_any_request(unlistable: Mailbox, prefix: str) -> None:
    with pytest.raises(InvalidKeyError):
        unlistable.list(prefix, start_after="a")  # type: ignore[call-arg]


def test_a_bad_start_after_is_rejected_before_any_request(unlistable: Mailbox) -> None:
    with pytest.raises(InvalidKeyError, match="start_after"):
        unlistable.list("p/", start_after=7)  # type: ignore[call-arg]


def test_the_capability_is_declared_where_the_store_starts_there(rig: Rig) -> None:
    box = rig.fresh()
    assert box.supports(Capability.LIST_START_AFTER) is (rig.name in NATIVE)


@pytest.mark.parametrize("rig_name", ["rig_memory", "rig_file", "rig_s3_moto"])
def test_the_conformance_property_passes_or_skips_with_the_reason(
    request: pytest.FixtureRequest, rig_name: str
) -> None:
    """On the stores whose full conformance run leaves this property out (moto: see
    conformance/test_backends.py), and the local ones; GCS and Azure run it in their full
    run, which requires it to PASS."""
    box = request.getfixturevalue(rig_name).fresh()
    result = run_property(property_named("list-start-after"), box, SuiteOptions(quick=True))
    if box.supports(Capability.LIST_START_AFTER):
        assert result.outcome is Outcome.PASS, result.detail
    else:
        assert result.outcome is Outcome.SKIP, result.detail
        assert "Capability.LIST_START_AFTER" in result.detail
