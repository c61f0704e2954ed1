"""shared_queue on real clusters: killed, paused and restarted learners, early exits, epochs.

Every test checks the store's own records: each unit has exactly one completion record
(``done/{unit}``), and its claim is in the ``done`` state.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import random
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

import pytest

from gradientmail import ConfigurationError, LeaseLostError, Mailbox, Session
from gradientmail._cli import main
from gradientmail.patterns._claims import parse_claim
from gradientmail.patterns.shared_queue import shared_queue
from gradientmail.status import plot_gantt, read_status
from tests.support import stress
from tests.support.lifecycle_workers import ITEMS_PER_UNIT, learner, read_log, units_of
from tests.support.pausing import pause_outside_locks
from tests.support.polling import wait_until
from tests.support.rigs import Rig

#: Rigs whose processes share keys and that support compare-and-swap.
PROCESS_RIGS = ["rig_file", "rig_s3_seaweed", "rig_gcs", "rig_azure"]
CTX = mp.get_context("spawn")


def done_units(box: Mailbox, prefix: str = "done/") -> list[str]:
    return [key[len(prefix) :] for key in box.list(prefix)]


def assert_completed_once(box: Mailbox, count: int) -> None:
    """Every unit has one completion record and a claim in the done state."""
    assert sorted(done_units(box)) == sorted(units_of(count))
    for unit in units_of(count):
        record = parse_claim(box.get("units/" + unit))
        assert record is not None
        assert record.extra.get("state") == "done", (unit, record)


def start(
    box: Mailbox, name: str, count: int, logs: Path, lease: float, item_s: float
) -> BaseProcess:
    proc = CTX.Process(
        target=learner, args=(box, name, count, str(logs / name), lease, item_s), daemon=True
    )
    proc.start()
    return proc


def held_by(box: Mailbox, owner: str) -> set[str]:
    """The units whose claim ``owner`` holds and that have no completion record yet."""
    held = set()
    finished = set(done_units(box))
    for key in box.list("units/"):
        unit = key[len("units/") :]
        record = parse_claim(box.get(key)) if unit not in finished else None
        if record is not None and record.owner == owner and record.extra["state"] == "claimed":
            held.add(unit)
    return held


def pid_of(proc: BaseProcess) -> int:
    """The pid of a started process."""
    assert proc.pid is not None, "the process was started"
    return proc.pid


def delivered(logs: Path, name: str) -> int:
    return len(read_log(str(logs / name)))


def all_items(logs: Path) -> Counter[tuple[str, int]]:
    return Counter((u, k) for path in logs.iterdir() for u, k, _ in read_log(str(path)))


# -- kill one, kill all, restart ----------------------------------------------------------------


def kill_one_run(box: Mailbox, logs: Path, seed: int, count: int = 40) -> None:
    """Four learners; SIGKILL one at a random point; the other three finish everything.

    The victim is the first learner, in a random order, to have delivered a random number
    of items (1 to 6): learners start at different times, so a learner chosen in advance
    may finish its share before it could be killed, and the test would prove nothing.
    """
    rng = random.Random(seed)
    names = [f"l{n}" for n in range(4)]
    procs = {name: start(box, name, count, logs, lease=1.5, item_s=0.03) for name in names}
    at = rng.randint(1, 6)
    rng.shuffle(names)
    victim = ""

    def someone_reached() -> bool:
        nonlocal victim
        victim = next((n for n in names if delivered(logs, n) >= at), "")
        return bool(victim)

    wait_until(someone_reached, 120, f"a learner to deliver {at} items")
    os.kill(pid_of(procs[victim]), signal.SIGKILL)
    for name, proc in procs.items():
        proc.join(timeout=180)
        if name != victim:
            assert proc.exitcode == 0, (name, proc.exitcode)
    assert procs[victim].exitcode == -signal.SIGKILL, "the victim was killed, not finished"
    assert_completed_once(box, count)
    items = all_items(logs)
    assert set(items) == {(u, k) for u in units_of(count) for k in range(ITEMS_PER_UNIT)}
    # Only the victim's units come twice: those it held when it died.
    victims = {u for u, _, _ in read_log(str(logs / victim))}
    assert {u for (u, _), n in items.items() if n > 1} <= victims


@pytest.mark.parametrize("rig_name", PROCESS_RIGS)
def test_a_killed_learner_units_are_finished_by_the_others(
    request: pytest.FixtureRequest, rig_name: str, tmp_path: Path
) -> None:
    rig: Rig = request.getfixturevalue(rig_name)
    kill_one_run(rig.fresh(), tmp_path, seed=hash(rig_name) % 1000)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("rig_name", "runs"),
    [("rig_file", 20), ("rig_s3_seaweed", 3), ("rig_gcs", 3), ("rig_azure", 3)],
)
def test_kill_one_learner_repeatedly(
    request: pytest.FixtureRequest, rig_name: str, runs: int, tmp_path: Path
) -> None:
    """Random kill points, ``runs`` of them with ``GM_STRESS=full``; in CI 6 on file:// and 2
    on each emulator (beside test_a_killed_learner_units_are_finished_by_the_others' one).

    Each kill point is also built on purpose, every run, by the kill tests above and by
    test_unit_claim_transitions.py, so CI's smaller sample keeps the random search's power
    over interleavings nobody wrote down, at a third of its cost.
    """
    rig: Rig = request.getfixturevalue(rig_name)
    runs = stress.size(ci=6 if rig_name == "rig_file" else 2, full=runs)
    for run in range(runs):
        logs = tmp_path / f"run{run}"
        logs.mkdir()
        kill_one_run(rig.fresh(), logs, seed=run)


@pytest.mark.parametrize("rig_name", PROCESS_RIGS)
def test_kill_all_then_restart_all_completes_each_unit_once(
    request: pytest.FixtureRequest, rig_name: str, tmp_path: Path
) -> None:
    rig: Rig = request.getfixturevalue(rig_name)
    box, count = rig.fresh(), 30
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    names = ["a", "b", "c"]
    procs = [start(box, n, count, first, lease=1.5, item_s=0.01) for n in names]
    wait_until(lambda: len(done_units(box)) >= count // 3, 120, "a third of the units done")
    for proc in procs:
        os.kill(pid_of(proc), signal.SIGKILL)
    for proc in procs:
        proc.join(timeout=30)
    # Done: a completion record, or a claim already swapped to done by a learner killed
    # before it wrote the record (the next learner writes it without loading the unit).
    done_before = set(done_units(box))
    for key in box.list("units/"):
        record = parse_claim(box.get(key))
        if record is not None and record.extra.get("state") == "done":
            done_before.add(key[len("units/") :])
    procs = [start(box, n, count, second, lease=1.5, item_s=0.01) for n in names]
    for proc in procs:
        proc.join(timeout=180)
        assert proc.exitcode == 0
    assert_completed_once(box, count)
    reloaded = {u for u, _ in all_items(second)}
    assert not reloaded & done_before, "units done in the first run were loaded again"
    assert reloaded | done_before == set(units_of(count))


@pytest.mark.parametrize(
    "rig_name",
    [pytest.param(r, marks=() if r == "rig_file" else pytest.mark.slow) for r in PROCESS_RIGS],
)
def test_a_restarted_learner_takes_back_its_own_units_first(
    request: pytest.FixtureRequest, rig_name: str, tmp_path: Path
) -> None:
    rig: Rig = request.getfixturevalue(rig_name)
    box, count = rig.fresh(), 30
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    # The other learner is paused from the kill until the restart has taken back what it
    # held; otherwise, idle once the free units are gone, it could take them over first (it
    # waits one lease from the victim's last renewal; the restart waits most of a lease
    # from its own start). Its own lease is long enough for the pause.
    other = start(box, "other", count, first, lease=60, item_s=0.02)
    victim = start(box, "victim", count, first, lease=10, item_s=0.02)
    wait_until(lambda: delivered(first, "victim") >= 3, 120, "the victim to start")
    os.kill(pid_of(other), signal.SIGSTOP)
    os.kill(pid_of(victim), signal.SIGKILL)
    victim.join(timeout=30)
    held = held_by(box, "victim")
    assert held, "the victim held units when it died"
    restarted = start(box, "victim", count, second, lease=10, item_s=0.02)
    try:
        wait_until(
            lambda: len({u for u, _, _ in read_log(str(second / "victim"))}) >= len(held),
            120,
            "the restart to deliver from as many units as its old incarnation held",
        )
    finally:
        os.kill(pid_of(other), signal.SIGCONT)
    restarted.join(timeout=180)
    other.join(timeout=180)
    assert restarted.exitcode == other.exitcode == 0
    order = list(dict.fromkeys(u for u, _, _ in read_log(str(second / "victim"))))
    assert set(order[: len(held)]) == held, (order, held)
    assert_completed_once(box, count)


# -- pause (SIGSTOP) -----------------------------------------------------------------------------


@pytest.mark.parametrize("rig_name", PROCESS_RIGS)
def test_a_paused_learner_is_fenced_and_never_completes_a_lost_unit(
    request: pytest.FixtureRequest, rig_name: str, tmp_path: Path
) -> None:
    rig: Rig = request.getfixturevalue(rig_name)
    box, count = rig.fresh(), 16
    # Slow items (16 units take it 8 s alone) keep it holding units when it is paused: at
    # 0.02 s an item it finished all 16 in 0.7 s, and on a loaded machine the pause could
    # come after that, leaving nothing to take over.
    paused = start(box, "paused", count, tmp_path, lease=1.0, item_s=0.25)
    wait_until(lambda: delivered(tmp_path, "paused") >= 1, 120, "the learner to start")
    pause_outside_locks(pid_of(paused))
    assert held_by(box, "paused"), "paused while it held a claimed unit"
    others = [start(box, n, count, tmp_path, lease=1.0, item_s=0.02) for n in ("x", "y")]
    wait_until(lambda: any(True for _ in box.list("reclaimed/")), 120, "a takeover")
    resumed_at = time.time()
    os.kill(pid_of(paused), signal.SIGCONT)
    paused.join(timeout=60)
    for proc in others:
        proc.join(timeout=180)
        assert proc.exitcode == 0
    assert paused.exitcode == 3, "the paused learner raised LeaseLostError"
    lost = {key[len("reclaimed/") :] for key in box.list("reclaimed/")}
    late = [u for u, _, t in read_log(str(tmp_path / "paused")) if u in lost and t > resumed_at]
    assert late == [], f"items of units it no longer owned, after resuming: {late}"
    for unit in lost:
        assert json.loads(box.get("done/" + unit))["by"] != "paused", unit
    assert_completed_once(box, count)


def test_a_paused_learner_restarted_with_its_id_delivers_nothing_beside_the_new_one(
    rig_file: Rig, tmp_path: Path
) -> None:
    """A learner paused just after a renewal, while it holds units, is started again under
    the same id (as a launcher would after a missed heartbeat). The restart takes the lease
    over only once the paused one can no longer trust it: continued at that very moment, the
    paused one stops with ``LeaseLostError`` and delivers no item more, so nothing is
    delivered by both at once."""
    box, count, lease = rig_file.fresh(), 24, 3.0
    old = start(box, "node", count, tmp_path, lease=lease, item_s=0.05)
    wait_until(lambda: delivered(tmp_path, "node") >= 1, 120, "the learner to start")

    def lease_record() -> dict[str, Any]:
        return json.loads(box.get("leases/node"))

    renewed = lease_record()["renewed_at"]
    wait_until(lambda: lease_record()["renewed_at"] != renewed, 30, "a renewal")
    pause_outside_locks(pid_of(old))  # just after a renewal: it trusts it for 0.75 lease
    before = delivered(tmp_path, "node")
    got: list[tuple[int, int]] = []

    def restart() -> None:  # in this process: it reads the lease at once, no spawn
        load = _Items(0.05)
        with shared_queue(
            units_of(count), mailbox=box, learner_id="node", load=load, lease=lease
        ) as queue:
            got.extend(queue)

    thread = threading.Thread(target=restart, daemon=True)
    thread.start()
    wait_until(lambda: lease_record()["incarnation"] == 2, 60, "the restart's takeover")
    os.kill(pid_of(old), signal.SIGCONT)  # the paused one wakes as soon as it was replaced
    old.join(timeout=60)
    thread.join(timeout=120)
    assert not thread.is_alive(), "the restart did not finish"
    assert old.exitcode == 3, "the paused incarnation raised LeaseLostError"
    assert delivered(tmp_path, "node") == before, "it delivered items after it was replaced"
    assert_completed_once(box, count)


class _Items:
    """``load`` of the lifecycle learners, in a thread: ``(unit, item)`` pairs at a cost."""

    def __init__(self, item_s: float) -> None:
        self.item_s = item_s

    def __call__(self, unit: int) -> Iterator[tuple[int, int]]:
        for k in range(ITEMS_PER_UNIT):
            time.sleep(self.item_s)  # the unit's simulated cost, not synchronisation
            yield unit, k


# -- early exit, epochs, refusals (threads) ------------------------------------------------------


def test_leaving_early_releases_units_to_the_others_at_once(box: Mailbox, tmp_path: Path) -> None:
    units = units_of(12)
    # An hour: a learner that waited for a lease to lapse, or a renewal period (20 minutes)
    # for a leader, would still be waiting when the join below gives up on it.
    lease = 3600.0
    got: dict[str, list[tuple[int, int]]] = {"early": [], "stays": []}
    early_left = threading.Event()

    def load(unit: int) -> Iterator[tuple[int, int]]:
        for k in range(ITEMS_PER_UNIT):
            yield unit, k

    with shared_queue(
        units, mailbox=box, learner_id="early", load=load, prefetch=4, lease=lease
    ) as q:
        for item in q:
            got["early"].append(item)
            if len(got["early"]) == 3:
                break
    early_left.set()
    stays_stats: list[Any] = []
    errors: list[BaseException] = []

    def stays() -> None:
        try:
            with (
                Session(box, "stays", publish_every=60),
                shared_queue(units, mailbox=box, learner_id="stays", load=load, lease=lease) as q,
            ):
                got["stays"].extend(q)
                stays_stats.append(q.stats.snapshot())
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    thread = threading.Thread(target=stays, name="stays", daemon=True)  # daemon: a hang fails
    thread.start()
    thread.join(60)
    # The released units are taken at the first poll, and the epoch ends without waiting a
    # period for a leader that left: anything lease-long would still be running.
    assert not thread.is_alive(), "'stays' waited for the lease or a renewal period (a hang)"
    assert not errors, errors
    (stats,) = stays_stats
    assert stats.units_reclaimed >= 1
    # Finding the released units is a takeover's scan of the claims, counted apart from the
    # listings that claim free units (queue.stats.cost.wait_scans).
    assert stats.cost.wait_scans >= 1, "the takeover's scan was not counted as one"
    every = {(u, k) for u in range(12) for k in range(ITEMS_PER_UNIT)}
    assert set(got["stays"]) | set(got["early"]) == every
    status = read_status(box)
    assert status.complete
    assert status.reclaimed >= 1
    assert {r["learner"]: r["state"] for r in status.learners}["early"] == "released"
    (record,) = [r for r in status.learners if r["learner"] == "stays"]
    reclaimed = [u for u in record["units"] if u[4]]
    assert len(reclaimed) == stats.units_reclaimed, "the plot hatches these units"
    png = tmp_path / "run.png"
    plot_gantt(status, str(png))
    assert png.read_bytes().startswith(b"\x89PNG")


def test_epochs_complete_every_unit_once_each_with_a_shared_shuffled_order(box: Mailbox) -> None:
    units = units_of(20)
    orders: dict[tuple[int, str], list[int]] = {}
    for epoch in range(3):
        for name in ("p", "q"):  # one after the other: p does the whole epoch
            with shared_queue(
                units, mailbox=box, learner_id=name, load=lambda u: [u], epoch=epoch, shuffle=7
            ) as queue:
                orders[(epoch, name)] = list(queue)
        assert sorted(orders[(epoch, "p")]) == list(range(20))
        assert orders[(epoch, "q")] == [], "the epoch was complete: nothing left for q"
        prefix = "done/" if epoch == 0 else f"epochs/{epoch}/done/"
        assert len(done_units(box, prefix)) == 20
    fresh = [orders[(e, "p")] for e in range(3)]
    assert len({tuple(o) for o in fresh}) == 3, "each epoch has its own order"


def test_the_shuffled_order_is_the_same_on_every_learner(rig_memory: Rig) -> None:
    units = units_of(20)
    seen = []
    for _ in range(2):
        with shared_queue(
            units,
            mailbox=rig_memory.fresh(),
            learner_id="x",
            load=lambda u: [u],
            epoch=2,
            shuffle=7,
        ) as queue:
            seen.append(list(queue))
    assert seen[0] == seen[1] != sorted(seen[0])


def test_a_second_run_of_a_complete_job_yields_nothing_and_says_complete(box: Mailbox) -> None:
    units = units_of(5)
    with shared_queue(units, mailbox=box, learner_id="a", load=lambda u: [u]) as queue:
        assert sorted(queue) == list(range(5))
    with shared_queue(units, mailbox=box, learner_id="a", load=lambda u: [u]) as queue:
        assert list(queue) == []
        assert queue.stats.units_done_before == 5
        assert queue.stats.run_complete
    assert read_status(box).complete


def test_a_different_mapping_on_the_same_prefix_is_refused(box: Mailbox) -> None:
    with shared_queue(units_of(4), mailbox=box, learner_id="a", load=lambda u: [u]) as queue:
        list(queue)
    other = {**units_of(3), "extra": 9}
    with (
        pytest.raises(ConfigurationError, match=r"4 units.*first difference: 'extra'"),
        shared_queue(other, mailbox=box, learner_id="a", load=lambda u: [u]),
    ):
        pass  # pragma: no cover - refused on entry


def test_two_live_learners_with_one_id_are_refused(box: Mailbox) -> None:
    units = units_of(4)
    release = threading.Event()

    def slow(unit: int) -> Iterator[int]:
        assert release.wait(60)
        yield unit

    with shared_queue(units, mailbox=box, learner_id="twin", load=slow, lease=0.6) as first:
        with (
            pytest.raises(ConfigurationError, match="'twin' is already running"),
            shared_queue(units, mailbox=box, learner_id="twin", load=slow, lease=0.6),
        ):
            pass  # pragma: no cover - refused on entry
        release.set()
        assert sorted(first) == [0, 1, 2, 3]


def test_a_lost_lease_raises_lease_lost_error_in_the_training_loop(box: Mailbox) -> None:
    units = units_of(3)
    many = lambda u: range(10_000)  # noqa: E731 - more items than the test will take
    with shared_queue(units, mailbox=box, learner_id="old", load=many, lease=0.3) as q:
        next(q)
        box.put("leases/old", b'{"state": "lost", "lost_by": "test"}')  # as a taker would
        with pytest.raises(LeaseLostError, match=r"'old' lost its lease.*declared lost by 'test'"):
            train_until_stopped(q, 30)


def train_until_stopped(queue: Iterator[object], seconds: float) -> None:
    """Take items (one per millisecond) until the queue raises, for at most ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:  # the next renewal (within 0.1 s) finds the loss
        next(queue)
        time.sleep(0.001)  # the training step; bounded by the deadline


# -- status ------------------------------------------------------------------------------------


def test_status_shows_a_lost_learner_and_watch_ends_on_a_stalled_run(
    rig_file: Rig, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = rig_file.url()
    from gradientmail import from_url

    box = from_url(url)
    proc = start(box, "gone", 10, tmp_path, lease=0.5, item_s=0.05)
    wait_until(lambda: delivered(tmp_path, "gone") >= 1, 120, "the learner to start")
    os.kill(pid_of(proc), signal.SIGKILL)
    proc.join(timeout=30)
    wait_until(lambda: read_status(box).stalled, 30, "the lease to expire")
    assert main(["status", url, "--watch", "--interval", "0.05"]) == 1
    out = capsys.readouterr().out
    assert "expired (unrenewed" in out  # no one declared it lost: it may only be paused
    assert "stalled" in out
    assert "ETA none" in out
    # A new learner finishes the job; then --watch ends at once with 0.
    finisher = start(box, "finisher", 10, tmp_path, lease=0.5, item_s=0.0)
    finisher.join(timeout=120)
    assert main(["status", url, "--watch", "--interval", "0.05"]) == 0
    assert "run complete" in capsys.readouterr().out


def test_status_of_a_url_without_a_run_exits_1_and_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "typo"
    assert main(["status", f"file://{missing}"]) == 1
    assert not missing.exists()
    assert "no run at" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["status", str(empty)]) == 1


def test_completions_keep_up_units_held_stay_bounded(box: Mailbox) -> None:
    """A fast loop never runs far ahead of its completion records (a kill loses little).

    Every one of the 120 units is a chance to run ahead: the bound holds at each.
    """
    units = units_of(120)
    most = 0
    with shared_queue(units, mailbox=box, learner_id="solo", load=lambda u: [u], prefetch=2) as q:
        for _ in q:
            most = max(most, q.stats.units_finished - q.stats.units_completed)
    assert most <= 2 + 2 + 1, most  # the buffer, the bound's margin, the unit just finished


def test_waiting_learners_never_record_a_live_owners_completion(rig_file: Rig) -> None:
    box = rig_file.fresh()
    units = units_of(300)

    def learn(name: str) -> None:
        with shared_queue(units, mailbox=box, learner_id=name, load=lambda u: [u]) as queue:
            list(queue)

    threads = [threading.Thread(target=learn, args=(f"t{n}",)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert sorted(done_units(box)) == sorted(units)
    for unit in units:
        done = json.loads(box.get("done/" + unit))
        claim = parse_claim(box.get("units/" + unit))
        assert claim is not None
        assert not done.get("repaired"), (unit, done)
        assert done["by"] == claim.owner, (unit, done, claim.owner)
