"""Bad arguments are refused up front, with ConfigurationError naming the argument, before
anything is claimed: never a bare TypeError, and never an error that arrives only after the
first claim, from the loader thread."""

from __future__ import annotations

from typing import Any

import pytest

import gradientmail
from gradientmail import ConfigurationError, from_url
from gradientmail.patterns.pipeline import Pipeline
from gradientmail.patterns.shared_queue import shared_queue

UNITS = {"a": 1, "b": 2}


def run_queue(box: Any, **options: Any) -> list[Any]:
    with shared_queue(UNITS, mailbox=box, learner_id="x", load=lambda u: [u], **options) as q:
        return list(q)


@pytest.mark.parametrize("order", [7, 3.5, object(), ["a", 1]])
def test_an_order_that_is_not_identifiers_is_refused(order: Any) -> None:
    box = from_url("memory://bad-arguments-order")
    with pytest.raises(ConfigurationError, match=r"^order "):
        run_queue(box, order=order)
    assert list(box.list()) == []  # refused before anything was written


@pytest.mark.parametrize("producers", [7, None, object()])
def test_producers_that_are_not_a_collection_are_refused(producers: Any) -> None:
    box = from_url("memory://bad-arguments-producers")
    with pytest.raises(ConfigurationError, match=r"^producers must be a collection"):
        Pipeline.over_mailbox(box, producers)
    with pytest.raises(ConfigurationError, match=r"^producers must be a collection"):
        Pipeline.in_process(producers)


@pytest.mark.parametrize("session", ["node-0", 3, object()])
def test_a_session_that_is_not_one_is_refused_before_any_claim(session: Any) -> None:
    box = from_url("memory://bad-arguments-session")
    with pytest.raises(ConfigurationError, match=r"^session must be a gradientmail.Session"):
        run_queue(box, session=session)
    assert list(box.list("units/")) == []


def test_a_session_on_another_mailbox_is_refused() -> None:
    other = from_url("memory://bad-arguments-elsewhere")
    box = from_url("memory://bad-arguments-mine")
    with pytest.raises(ConfigurationError, match="publishes to memory://bad-arguments-elsewhere"):
        run_queue(box, session=gradientmail.Session(other, "x"))
    assert list(box.list("units/")) == []


def test_a_session_on_the_same_url_through_another_handle_is_taken() -> None:
    box = from_url("memory://bad-arguments-same")
    with (
        gradientmail.Session(from_url("memory://bad-arguments-same"), "x") as session,
        shared_queue(UNITS, mailbox=box, learner_id="x", load=lambda u: [u], session=session) as q,
    ):
        assert sorted(q) == [1, 2]
    assert session.units_finished == 2
