"""Liveness across real processes: a learner process killed without leaving (SIGKILL), or
stopped (SIGSTOP), leaves the others' group batch once they have moved the shared model on
without it, and a stopped one is back when it resumes.

Three learner processes at the same pace, each asked for at most 4 items a step, report after
each step how many others they count in the group's batch, and the group's batch itself
(at most 8 once a learner counts only one other).
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
    each reporting after each step to a file under ``tmp``."""

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

    def pid(self, name: str) -> int:
        pid = self.procs[name].pid
        assert pid is not None, f"{name} started"
        return pid

    def reports(self, name: str) -> list[dict[str, Any]]:
        return reports(str(self.tmp / name))

    def last(self, name: str) -> dict[str, Any]:
        lines = self.reports(name)
        return lines[-1] if lines else {"steps": 0, "others": 0, "version": -1}

    def all_count(self, others: int, names: tuple[str, ...], what: str) -> None:
        """Wait until each of ``names`` last reported counting ``others`` other learners."""
        wait_until(lambda: all(self.last(n)["others"] == others for n in names), 120, what)

    def finish(self) -> None:
        """Stop every learner still running: the survivors leave normally, and one that
        does not end within two minutes is killed before the test fails."""
        Path(self.stop).touch()
        for name, proc in self.procs.items():
            proc.join(timeout=120)
            if proc.exitcode is None:
                proc.kill()
                proc.join(timeout=60)
                pytest.fail(f"learner {name} did not leave within two minutes")


SURVIVORS = ("a", "b")


def test_a_learner_process_killed_without_leaving_leaves_the_others_group_batch(
    rig_file: Rig, tmp_path: Path
) -> None:
    """Its ledger entry stays active for ten minutes; the survivors stop counting it once
    the shared model moved on by ten of its usual intervals (about 3 versions each), and
    go on training."""
    group = Group(rig_file.fresh(), tmp_path)
    try:
        group.all_count(2, ("a", "b", "victim"), "every learner counting the other two")
        killed_at = max(group.last(name)["version"] for name in SURVIVORS)
        os.kill(group.pid("victim"), signal.SIGKILL)
        group.procs["victim"].join(timeout=60)
        group.all_count(1, SURVIVORS, "the survivors leaving the killed learner out")
        for name in SURVIVORS:
            left_at = next(
                r["version"]
                for r in group.reports(name)
                if r["version"] > killed_at and r["others"] == 1
            )
            # ten of its usual intervals, about 3 versions each here (12 to 35 measured);
            # the bound leaves room for intervals stretched by a loaded machine
            assert left_at - killed_at <= 120, (name, killed_at, left_at)
        before = {name: group.last(name)["steps"] for name in SURVIVORS}
        wait_until(
            lambda: all(group.last(n)["steps"] > s + 20 for n, s in before.items()),
            120,
            "the survivors training on",
        )
        for name in SURVIVORS:
            assert group.last(name)["others"] == 1
            assert group.last(name)["group_batch"] <= 8, "two learners of at most 4 items"
    finally:
        group.finish()
    assert [group.procs[name].exitcode for name in SURVIVORS] == [0, 0]


def test_a_stopped_learner_process_leaves_the_group_batch_and_is_back_when_resumed(
    rig_gcs: Rig, tmp_path: Path
) -> None:
    """SIGSTOP, then SIGCONT (a node suspended and resumed). On a store whose swaps the
    server decides, a client stopped mid-request holds nothing, so the others go on."""
    group = Group(rig_gcs.fresh(), tmp_path)
    victim = group.pid("victim")
    try:
        group.all_count(2, ("a", "b", "victim"), "every learner counting the other two")
        os.kill(victim, signal.SIGSTOP)
        group.all_count(1, SURVIVORS, "the survivors leaving the stopped learner out")
        assert all(group.last(name)["group_batch"] <= 8 for name in SURVIVORS)
        os.kill(victim, signal.SIGCONT)
        group.all_count(2, SURVIVORS, "the survivors counting the resumed learner again")
    finally:
        os.kill(victim, signal.SIGCONT)
        group.finish()
    assert [proc.exitcode for proc in group.procs.values()] == [0, 0, 0]
