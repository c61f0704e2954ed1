"""The one ID rule: ``validate_segment`` accepts exactly the single-segment keys.

A learner checks every unit identifier when it starts (100,000 of them at scale), so the
common plain-ASCII case takes a fast path; these tests hold the fast path to the full rule.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gradientmail._errors import InvalidKeyError
from gradientmail._keys import validate_key, validate_segment, validate_segments

PLAIN = st.text(alphabet="abcXYZ019_.,:;=@+~-/\\ \t\x00é", min_size=0, max_size=12)
# Near-plain identifiers for the batch check: its fast path joins them with newlines.
LINES = st.text(alphabet="ab.\n/", min_size=0, max_size=4)


def full_rule(value: str) -> bool:
    """A segment is a valid key without '/' (the rule written out, no fast path)."""
    if "/" in value:
        return False
    try:
        validate_key(value)
    except InvalidKeyError:
        return False
    return True


@settings(max_examples=2000, deadline=None)
@given(st.one_of(PLAIN, st.text(max_size=8)))
def test_validate_segment_accepts_exactly_the_valid_single_segment_keys(value: str) -> None:
    try:
        validate_segment(value, "unit identifier")
        accepted = True
    except InvalidKeyError:
        accepted = False
    assert accepted == full_rule(value), value


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        (".", False),
        ("..", False),
        ("...", True),
        ("-lead", True),
        ("a" * 255, True),
        ("a" * 1024, True),
        ("a" * 1025, False),
        ("é" * 512, True),
        ("é" * 513, False),
    ],
)
def test_edges_of_the_fast_path(value: str, valid: bool) -> None:
    if valid:
        assert validate_segment(value, "unit identifier") == value
    else:
        with pytest.raises(InvalidKeyError, match="unit identifier"):
            validate_segment(value, "unit identifier")


@settings(max_examples=1000, deadline=None)
@given(st.lists(st.one_of(LINES, PLAIN, st.integers(), st.just("x" * 256)), max_size=6))
def test_validate_segments_accepts_a_list_exactly_when_each_item_is_valid(
    values: list[object],
) -> None:
    first_bad = next((v for v in values if not (isinstance(v, str) and full_rule(v))), None)
    if first_bad is not None:
        with pytest.raises(InvalidKeyError) as raised:
            validate_segments(iter(values), "unit identifier")
        assert raised.value.key == first_bad  # the first invalid identifier is named
    else:
        assert validate_segments(iter(values), "unit identifier") == values
