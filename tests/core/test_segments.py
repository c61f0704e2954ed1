"""The one ID rule: ``validate_segment`` accepts exactly the single-segment keys.

A learner checks every unit identifier when it starts (100,000 of them at scale), so the
common plain-ASCII case takes a fast path; these tests hold the fast path to the full rule.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gradientmail.errors import InvalidKeyError
from gradientmail.keys import validate_key, validate_segment

PLAIN = st.text(alphabet="abcXYZ019_.,:;=@+~-/\\ \t\x00é", min_size=0, max_size=12)


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
