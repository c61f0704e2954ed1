"""Liveness across real processes: a learner process killed without leaving (SIGKILL), or
stopped (SIGSTOP), leaves the others' group batch once they have moved the shared model on
without it, and a stopped one is back when it resumes.

Three learner processes at the same pace, each asked for at most 4 items a step: the group's
batch is above 8 exactly while a learner counts all three, and at most 8 once it counts two.
The rules themselves, on driven heads, are ``test_exchange_liveness.py``'s.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

from gradientmail.mailbox import Mailbox
from tests.support.exchange_workers import recipe_steps, reports
from tests.support.polling import wait_until
from tests.support.rigs import Rig

CTX = mp.get_context("spawn")


class Group:
    """Learner processes ``a``, ``b`` and ``victim`` training with the recipe on one store,
    each reporting its steps and group batch to a file under ``tmp``."""

    def __init__(self, box: Mailbox, tmp: Path) -> None:
        self.tmp = tmp
        self.stop = str(tmp / "stop")
        self.procs = {
            name: CTX.Process(
                target=recipe_steps, args=(box, name, str(tmp / name), self.stop, 0.005)
            )
            for name in ("a", "b", "victim")
        }
        for proc in self.procs.values():
            proc.start()

    def last(self, name: str) -> dict[str, Any]:
        lines = reports(str(self.tmp / name))
        return lines[-1] if lines else {"steps": 0, "group_batch": 0.0}

    def survivors_see(self, condition: Any, what: str) -> list[int]:
        """Wait until ``a`` and ``b`` each report a group batch meeting ``condition``; the
        step at which each first did, after the steps they had made when called."""
        start = {name: self.last(name)["steps"] for name in ("a", "b")}
        wait_until(
            lambda: all(condition(self.last(name)["group_batch"]) for name in start), 120, what
        )
        return [
            next(
                r["steps"]
                for r in reports(str(self.tmp / name))[start[name] :]
                if condition(r["group_batch"])
            )
            - start[name]
            for name in start
        ]

    def finish(self) -> None:
        Path(self.stop).touch()
        for name in ("a", "b"):
            self.procs[name].join(timeout=120)
            assert self.procs[name].exitcode == 0, name


def counts_three(group_batch: float) -> bool:
    return group_batch > 8


def counts_two(group_batch: float) -> bool:
    return group_batch <= 8


def test_a_learner_process_killed_without_leaving_leaves_the_others_group_batch(
    rig_file: Rig, tmp_path: Path
) -> None:
    """Its ledger entry stays active for ten minutes; the survivors stop counting it within
    a few dozen of their steps, and go on training."""
    group = Group(rig_file.fresh(), tmp_path)
    try:
        wait_until(
            lambda: all(counts_three(group.last(n)["group_batch"]) for n in ("a", "b", "victim")),
            120,
            "every learner counting all three",
        )
        os.kill(group.procs["victim"].pid or 0, signal.SIGKILL)
        group.procs["victim"].join(timeout=60)
        steps = group.survivors_see(counts_two, "the survivors leaving the killed learner out")
        assert max(steps) <= 100, steps  # ten rounds of three versions, about 15 steps each
        before = {name: group.last(name)["steps"] for name in ("a", "b")}
        wait_until(
            lambda: all(group.last(n)["steps"] > s + 20 for n, s in before.items()),
            120,
            "the survivors training on",
        )
        assert all(counts_two(group.last(name)["group_batch"]) for name in ("a", "b"))
    finally:
        group.procs["victim"].kill()
        group.finish()


def test_a_stopped_learner_process_leaves_the_group_batch_and_is_back_when_resumed(
    rig_gcs: Rig, tmp_path: Path
) -> None:
    """SIGSTOP, then SIGCONT (a node suspended and resumed). On a store whose swaps the
    server decides, a client stopped mid-request holds nothing, so the others go on."""
    group = Group(rig_gcs.fresh(), tmp_path)
    victim = group.procs["victim"].pid or 0
    try:
        wait_until(
            lambda: all(counts_three(group.last(n)["group_batch"]) for n in ("a", "b", "victim")),
            120,
            "every learner counting all three",
        )
        os.kill(victim, signal.SIGSTOP)
        group.survivors_see(counts_two, "the survivors leaving the stopped learner out")
        os.kill(victim, signal.SIGCONT)
        group.survivors_see(counts_three, "the survivors counting the resumed learner again")
    finally:
        os.kill(victim, signal.SIGCONT)
        Path(group.stop).touch()
        group.procs["victim"].join(timeout=120)
        group.finish()
    assert group.procs["victim"].exitcode == 0
