"""``lease`` is seconds: every pattern refuses a lease that never ends, and warns about one
longer than an hour (milliseconds passed as seconds, most likely). The exchange's
``active_window`` is a duration of the same kind, checked by the same rule in its own words."""

from __future__ import annotations

import math
import uuid
import warnings
from collections.abc import Callable
from typing import Any

import pytest

from gradientmail import ConfigurationError, from_url
from gradientmail.patterns.pipeline import Pipeline
from gradientmail.patterns.shared_queue import shared_queue


def start_queue(lease: Any) -> None:
    box = from_url("memory://lease-argument-queue")
    with shared_queue({"u": 1}, mailbox=box, learner_id="a", load=lambda u: [u], lease=lease):
        pass


def start_pipeline(lease: Any) -> None:
    Pipeline.over_mailbox(from_url("memory://lease-argument-pipeline"), ["p"], lease=lease)


def start_dataset(lease: Any) -> None:
    from gradientmail.torch import SharedQueueDataset

    box = from_url("memory://lease-argument-dataset")
    SharedQueueDataset({"u": 1}, mailbox=box, load=lambda u: [u], learner_id="a", lease=lease)


def start_exchange(lease: Any) -> None:
    import torch

    from gradientmail.torch import Exchange

    # A fresh store each time: the window is recorded in the shared model's layout.
    box = from_url(f"memory://lease-argument-exchange-{uuid.uuid4().hex}")
    with Exchange(torch.nn.Linear(1, 1), mailbox=box, learner_id="a", active_window=lease):
        pass


STARTS: list[Callable[[Any], None]] = [start_queue, start_pipeline, start_dataset, start_exchange]


@pytest.mark.parametrize("start", STARTS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("lease", [math.inf, float("nan"), -1, 0, "60", True])
def test_a_lease_that_is_not_a_finite_positive_number_is_refused(
    start: Callable[[Any], None], lease: Any
) -> None:
    with pytest.raises(ConfigurationError, match=r"\b(lease|active_window)\b") as refused:
        start(lease)
    assert not isinstance(refused.value, OverflowError)


@pytest.mark.parametrize("start", STARTS, ids=lambda f: f.__name__)
def test_a_lease_over_an_hour_is_warned_about_naming_milliseconds(
    start: Callable[[Any], None],
) -> None:
    with pytest.warns(
        UserWarning, match=r"(lease|active_window)=60000 seconds is more than an hour.*pass 60\b"
    ):
        start(60_000)


@pytest.mark.parametrize("start", STARTS, ids=lambda f: f.__name__)
def test_a_lease_of_an_hour_or_less_is_taken_quietly(start: Callable[[Any], None]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        start(3_600)


def test_the_exchange_window_is_explained_as_what_it_is_not_as_a_queue_lease() -> None:
    with pytest.raises(ConfigurationError) as refused:
        start_exchange(math.inf)
    assert "count as active" in str(refused.value)
    assert "600 is the default" in str(refused.value)
    assert "hold its work" not in str(refused.value)
