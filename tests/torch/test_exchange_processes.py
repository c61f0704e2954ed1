"""``memory://`` is one process's store: an Exchange over it in several processes would let
each train its own model unseen, so it is refused wherever a second process may run."""

from __future__ import annotations

import multiprocessing as mp
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from torch.utils.data import DataLoader, IterableDataset  # noqa: E402 - after the importorskip

from gradientmail import ConfigurationError, Mailbox, from_url  # noqa: E402
from gradientmail.torch import Exchange  # noqa: E402
from tests.support.exchange_workers import exchange_outcome, integer_model  # noqa: E402
from tests.support.rigs import Rig  # noqa: E402


def test_memory_in_a_torch_distributed_job_of_several_processes_is_refused(
    monkeypatch: pytest.MonkeyPatch, rig_file: Rig
) -> None:
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ConfigurationError, match=r"torch\.distributed job of 2 processes"):
        Exchange(integer_model(), mailbox=from_url("memory://exchange-ranks"), learner_id="a")
    Exchange(integer_model(), mailbox=rig_file.fresh(), learner_id="a")  # shared: accepted


def test_memory_in_a_single_process_is_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORLD_SIZE", "1")
    Exchange(integer_model(), mailbox=from_url("memory://exchange-alone"), learner_id="a")


def test_memory_in_a_spawned_process_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "outcome"
    box = from_url("memory://exchange-spawned")
    child = mp.get_context("spawn").Process(target=exchange_outcome, args=(box, str(out)))
    child.start()
    child.join(timeout=120)
    assert child.exitcode == 0
    outcome = out.read_text()
    assert outcome.startswith("ConfigurationError"), outcome
    assert "memory://exchange-spawned" in outcome
    assert "not shared across processes" in outcome


class Builds(IterableDataset[str]):
    """In each DataLoader worker: build an Exchange over the mailbox, yield what happened."""

    def __init__(self, box: Mailbox) -> None:
        self.box = box

    def __iter__(self) -> Any:
        try:
            Exchange(integer_model(), mailbox=self.box, learner_id="worker")
            yield "accepted"
        except ConfigurationError as exc:
            yield str(exc)


def test_memory_in_a_dataloader_worker_is_refused() -> None:
    loader = DataLoader(
        Builds(from_url("memory://exchange-worker")), num_workers=1, batch_size=None
    )
    (outcome,) = list(loader)
    assert "DataLoader worker" in outcome, outcome
