"""Pipeline over a mailbox: consumers that die, pause, leave early or restart lose nothing.

What a user relies on: every item is delivered; an item a consumer's ``next()`` returned is
its own and is never delivered again; items it had only prefetched (claimed, not returned)
go to the other consumers. The kill and pause tests use real processes that signal
themselves (SIGKILL, SIGSTOP) at a random point while holding prefetched items, on
``file://`` and on an emulator.
"""

from __future__ import annotations

import json
import logging
import multiprocessing as mp
import os
import random
import signal
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from gradientmail import ConfigurationError, Mailbox, from_url
from gradientmail.backends.memory import MemoryMailbox
from gradientmail.mailbox import Capability
from gradientmail.patterns.pipeline import Pipeline, PipelineError
from gradientmail.patterns.pipeline._records import ItemClaim, claim_key
from tests.support.pausing import pause_outside_locks
from tests.support.pipeline_workers import (
    FAST,
    JOIN,
    consumer_victim,
    open_pipe,
    parse,
    payload,
    produce,
    read_victim_log,
    reap,
    run_threads,
    spawn,
)
from tests.support.rigs import Rig

pytestmark = pytest.mark.timeout(300)

Item = tuple[str, int]
COUNTS = {f"gen-{i}": 30 for i in range(4)}
NAMES = list(COUNTS)
ALL_ITEMS = {(p, s) for p, n in COUNTS.items() for s in range(n)}
#: A deep prefetch, so that a consumer holds several items it has not returned; FAST
#: leases, so that a dead consumer is noticed within seconds.
OPTIONS: dict[str, Any] = {"capacity": 16, "prefetch": 4, "stall_timeout": 60, **FAST}


def claims_of(box: Mailbox, counts: dict[str, int]) -> dict[Item, ItemClaim]:
    """Every item's claim as the run left it."""
    found = {}
    for producer, count in counts.items():
        for seq in range(count):
            claim = ItemClaim.read(box, claim_key(producer, seq))
            assert claim is not None, f"item {producer}#{seq} was never claimed"
            found[(producer, seq)] = claim
    return found


def start_victim(
    rig: Rig,
    url: str,
    log_path: Path,
    stop_after: int,
    stop_signal: signal.Signals,
    options: dict[str, Any] = OPTIONS,
    signalling: Any = None,
) -> mp.process.BaseProcess:
    """Spawn :func:`consumer_victim` as consumer ``victim`` and wait until it is open."""
    ready = mp.get_context("spawn").Event()
    victim = spawn(
        consumer_victim,
        url,
        NAMES,
        "victim",
        str(log_path),
        stop_after,
        int(stop_signal),
        ready,
        options=rig.options,
        pipe_options=options,
        signalling=signalling,
    )
    assert ready.wait(JOIN), "the victim never opened its consumer"
    return victim


def stop_point(trial: int) -> int:
    """After how many items the victim of ``trial`` signals itself."""
    return random.Random(trial).randint(1, 12)


def run_beside_a_victim(
    rig: Rig, log_path: Path, trial: int, stop_signal: signal.Signals
) -> tuple[list[Item], list[Item], str | None, dict[Item, ItemClaim]]:
    """Producers and two surviving consumers in threads, beside one victim process.

    The victim signals itself after a random number of items. With SIGSTOP it is continued
    once the survivors have finished. Returns what the survivors took, what the victim
    logged as returned by its ``next()``, its outcome line, and every item's claim.
    """
    url = rig.url()
    # The survivors open once the victim signals itself: open sooner, on a loaded machine
    # they could take every item before the victim reached its stop point.
    signalling = mp.get_context("spawn").Event()
    victim = start_victim(rig, url, log_path, stop_point(trial), stop_signal, signalling=signalling)
    survivors: dict[str, list[Item]] = {}

    def survive(name: str) -> None:
        assert signalling.wait(JOIN), "the victim never reached its stop point"
        got = survivors[name] = []
        with open_pipe(url, NAMES, rig.options, **OPTIONS).consumer(name) as items:
            got.extend(parse(item) for item in items)

    producers = [
        (produce, (url, NAMES, p, n), {"options": rig.options, "delay": 0.02})
        for p, n in COUNTS.items()
    ]
    try:
        errors = run_threads(*producers, *[(survive, (f"survivor-{i}",), {}) for i in range(2)])
    finally:
        if stop_signal == signal.SIGSTOP and victim.pid is not None:
            os.kill(victim.pid, signal.SIGCONT)
        reap([victim])
    assert not errors, errors
    assert victim.exitcode == (-signal.SIGKILL if stop_signal == signal.SIGKILL else 0)
    taken_by_victim, outcome = read_victim_log(str(log_path))
    claims = claims_of(rig.open(url), COUNTS)
    return [i for got in survivors.values() for i in got], taken_by_victim, outcome, claims


def assert_delivered_once(
    survivors: list[Item], victim: list[Item], claims: dict[Item, ItemClaim]
) -> set[Item]:
    """Every item delivered; the victim's are its own but possibly the last one it took.

    That last item's delivery is recorded in the background while the consumer works on it;
    if the victim stopped before the record landed, the item went to a survivor too.
    Returns the items delivered twice (that one, or none).
    """
    duplicates = [item for item, n in Counter(survivors).items() if n > 1]
    assert not duplicates, f"delivered twice among the survivors: {duplicates[:5]}"
    twice = set(survivors) & set(victim)
    assert twice <= set(victim[-1:]), f"items the victim's next() returned went again: {twice}"
    missing = ALL_ITEMS - set(survivors) - set(victim)
    assert not missing, f"lost: {sorted(missing)[:5]} ({len(missing)} in all)"
    # The store agrees: exactly those are delivered under the victim's name (incarnation 1;
    # a consumer restarted with its id is incarnation 2).
    victims = {i for i, c in claims.items() if (c.owner, c.incarnation) == ("victim", 1)}
    assert victims == set(victim) - twice
    assert all(c.state == "delivered" for c in claims.values())
    return twice


def _trials(fast: int, slow: int, rig: str) -> list[Any]:
    return [
        pytest.param(rig, t, marks=() if t < fast else pytest.mark.slow, id=f"{rig[4:]}-{t}")
        for t in range(fast + slow)
    ]


# -- a consumer dies ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rig_name", "trial"), _trials(1, 9, "rig_file") + _trials(0, 2, "rig_gcs")
)
def test_a_killed_consumers_prefetched_items_go_to_the_others(
    request: pytest.FixtureRequest, tmp_path: Path, rig_name: str, trial: int
) -> None:
    rig: Rig = request.getfixturevalue(rig_name)
    survivors, victim, outcome, claims = run_beside_a_victim(
        rig, tmp_path / "victim.log", trial, signal.SIGKILL
    )
    assert outcome is None, "the victim died before it could say how it ended"
    assert_delivered_once(survivors, victim, claims)
    taken_over = {i for i, c in claims.items() if c.taken_from == "victim"}
    assert taken_over, "the victim held prefetched items when it died; none were taken over"
    assert taken_over <= set(survivors)


# -- a consumer pauses past its lease -------------------------------------------------------


# Not on file://: a process stopped while one of its threads holds one of the store's lock
# stripes blocks the others' writes to that stripe until it continues, and this test
# continues the victim only once the others have finished.
@pytest.mark.parametrize(
    ("rig_name", "trial"), _trials(1, 0, "rig_gcs") + _trials(0, 1, "rig_azure")
)
def test_a_paused_consumer_is_fenced_and_never_returns_an_item_taken_over(
    request: pytest.FixtureRequest, tmp_path: Path, rig_name: str, trial: int
) -> None:
    rig: Rig = request.getfixturevalue(rig_name)
    log = tmp_path / "victim.log"
    survivors, victim, outcome, claims = run_beside_a_victim(rig, log, trial, signal.SIGSTOP)
    assert len(victim) == stop_point(trial), "it returned items after it was continued"
    assert outcome is not None
    assert outcome.startswith("LeaseLostError"), outcome
    twice = assert_delivered_once(survivors, victim, claims)
    for producer, seq in twice:  # a duplicate is never silent: the victim names it
        assert f"item {producer}#{seq}" in outcome
        assert "may be delivered twice" in outcome
    assert {i for i, c in claims.items() if c.taken_from == "victim"}


# -- a consumer leaves, restarts, or shares an id -------------------------------------------


def test_items_a_closed_consumer_had_prefetched_go_to_the_others(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="gradientmail")
    url = rig.url()
    counts = {"a": 12}
    with open_pipe(url, ["a"], rig.options).producer("a") as out:
        for seq in range(12):
            out.put(payload("a", seq))
    decoded = threading.Semaphore(0)

    def decode(data: bytes) -> bytes:
        decoded.release()
        return data

    pipe = open_pipe(url, ["a"], rig.options, prefetch=3, **FAST)
    with pipe.consumer("leaver", decode=decode) as items:
        first = parse(next(items))
        for _ in range(3):  # the first item, and two more claimed and not returned
            assert decoded.acquire(timeout=JOIN)
    stayer = open_pipe(url, ["a"], rig.options, prefetch=3, **FAST)
    with stayer.consumer("stayer") as items:
        rest = [parse(item) for item in items]
    assert sorted([first, *rest]) == [("a", seq) for seq in range(12)], "each item once"
    assert stayer.stats().consumers["stayer"].taken_over >= 2
    claims = claims_of(rig.open(url), counts)
    assert {i for i, c in claims.items() if c.taken_from == "leaver"} <= set(rest)
    # An operator is told which consumer's items were taken over, and by whom.
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("'leaver'" in m and "'stayer' takes them over" in m for m in warned), warned


def test_a_restarted_consumer_takes_back_its_prefetched_items_without_waiting(
    rig_file: Rig, tmp_path: Path
) -> None:
    url = rig_file.url()
    for producer, count in COUNTS.items():
        produce(url, NAMES, producer, count, pipe_options={"capacity": 200})
    log = tmp_path / "victim.log"
    options = {**OPTIONS, "capacity": 200}
    victim = start_victim(rig_file, url, log, 3, signal.SIGKILL, options)
    reap([victim])
    taken_by_victim, _ = read_victim_log(str(log))
    # An hour's lease: the restarted id takes its own claims back at once; a consumer that
    # waited for its old lease to lapse would still be waiting when the join gives up.
    pipe = open_pipe(url, NAMES, **{**options, "lease": 3600.0, "stall_timeout": None})
    rest: list[Item] = []
    errors: list[BaseException] = []

    def restarted() -> None:
        try:
            with pipe.consumer("victim") as items:
                rest.extend(parse(item) for item in items)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    thread = threading.Thread(target=restarted, daemon=True)  # daemon: a hang fails, not waits
    thread.start()
    thread.join(JOIN)
    assert not thread.is_alive(), "the restarted consumer waited for its own lease (a hang)"
    assert not errors, errors
    assert_delivered_once(rest, taken_by_victim, claims_of(from_url(url), COUNTS))
    assert pipe.stats().consumers["victim"].taken_over >= 1


def test_a_paused_consumer_restarted_with_its_id_returns_nothing_beside_the_new_one(
    rig_file: Rig, tmp_path: Path
) -> None:
    """A consumer paused just after a heartbeat, then opened again under the same id: the
    new one takes the lease over only once the paused one can no longer trust it, so the
    paused one, continued at that moment, raises ``LeaseLostError`` and returns no item
    more; every item is delivered, and only a prefetched one is delivered again."""
    url = rig_file.url()
    options = {**OPTIONS, "capacity": 200}
    for producer, count in COUNTS.items():
        produce(url, NAMES, producer, count, pipe_options={"capacity": 200})
    log = tmp_path / "victim.log"
    ready = mp.get_context("spawn").Event()
    never = 10**6  # it never stops itself: the test pauses it, long before its 6 s of items
    victim = spawn(
        consumer_victim,
        url,
        NAMES,
        "victim",
        str(log),
        never,
        0,
        ready,
        pipe_options=options,
        step_s=0.05,
    )
    assert ready.wait(JOIN), "the victim never opened its consumer"
    box = from_url(url)

    def lease_record() -> dict[str, Any]:
        return json.loads(box.get("leases/consumers/victim"))

    renewed = lease_record()["renewed_at"]
    deadline = time.monotonic() + JOIN
    while lease_record()["renewed_at"] == renewed or not read_victim_log(str(log))[0]:
        assert time.monotonic() < deadline, "no item and no heartbeat from the victim"
        time.sleep(0.005)  # polling a state nothing notifies, not a synchronising wait
    assert victim.pid is not None
    pause_outside_locks(victim.pid)  # just after a beat: it trusts it for 0.75 lease
    returned, _ = read_victim_log(str(log))
    rest: list[Item] = []

    def restarted() -> None:
        with open_pipe(url, NAMES, **{**options, "stall_timeout": None}).consumer(
            "victim"
        ) as items:
            rest.extend(parse(item) for item in items)

    thread = threading.Thread(target=restarted, daemon=True)
    thread.start()
    deadline = time.monotonic() + JOIN
    while lease_record()["incarnation"] < 2:
        assert time.monotonic() < deadline, "the restarted consumer never took the lease over"
        time.sleep(0.005)  # polling a state nothing notifies, not a synchronising wait
    os.kill(victim.pid, signal.SIGCONT)  # the paused one wakes as soon as it was replaced
    thread.join(JOIN)
    reap([victim])
    assert not thread.is_alive(), "the restarted consumer did not finish"
    after, outcome = read_victim_log(str(log))
    assert after == returned, "the paused consumer returned items after it was replaced"
    assert outcome is not None
    assert outcome.startswith("LeaseLostError"), outcome
    assert_delivered_once(rest, returned, claims_of(box, COUNTS))


def test_two_open_consumers_may_not_share_an_id() -> None:
    # A second opener watches the lease for 1.5 renewal periods: 0.75 s here, so that a
    # renewal thread delayed by a busy machine is still seen.
    timings: dict[str, Any] = {"heartbeat_interval": 0.5, "lease": 5.0}
    pipe = Pipeline.over_mailbox(MemoryMailbox("pipeline-shared-id"), ["a"], **timings)
    with pipe.consumer("twin"), pytest.raises(ConfigurationError, match="in use by a live"):
        pipe.consumer("twin")
    pipe.consumer("twin").close()  # free again once the first one closed


# -- without compare-and-swap ---------------------------------------------------------------


class NoCompareAndSwap(MemoryMailbox):
    capabilities = frozenset({Capability.ATOMIC_CREATE})


def test_without_compare_and_swap_a_gone_consumers_items_fail_the_others_loudly() -> None:
    box = NoCompareAndSwap("pipeline-no-cas")
    pipe = Pipeline.over_mailbox(box, ["a"], prefetch=3, stall_timeout=60, **FAST)
    with pipe.producer("a") as out:
        for seq in range(12):
            out.put(payload("a", seq))
    decoded = threading.Semaphore(0)

    def decode(data: bytes) -> bytes:
        decoded.release()
        return data

    with pipe.consumer("leaver", decode=decode) as items:
        next(items)
        for _ in range(3):
            assert decoded.acquire(timeout=JOIN)
    claims = {seq: ItemClaim.read(box, claim_key("a", seq)) for seq in range(12)}
    lost = [
        f"a#{seq}"
        for seq, claim in claims.items()
        if claim is not None and (claim.owner, claim.state) == ("leaver", "claimed")
    ]
    assert len(lost) >= 2
    got: list[Item] = []
    with (
        pytest.raises(PipelineError, match="no compare-and-swap") as caught,
        pipe.consumer("stayer") as items,
    ):
        got.extend(parse(item) for item in items)
    assert all(name in str(caught.value) for name in lost), (lost, caught.value)
    assert len(got) == 12 - 1 - len(lost), "every other item still arrives first"
