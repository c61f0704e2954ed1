"""Pipeline, mailbox transport, case 2: producer processes on ``file://`` (and emulators).

Scaled down; the full size is benchmarks/pipeline.py. Includes the failure cases that need a
real process: SIGKILL of a producer, and one stopped past its lease and then resumed.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
from collections import Counter
from typing import Any

import pytest

from gradientmail import from_url
from gradientmail.patterns.pipeline import ProducerFailedError, ProducerLostError
from gradientmail.patterns.pipeline._records import End, end_key
from tests.support.pausing import pause_outside_locks
from tests.support.pipeline_workers import (
    FAST,
    JOIN,
    assert_exactly_once,
    consume,
    consume_to_queue,
    drain,
    open_pipe,
    parse,
    produce,
    produce_and_report,
    reap,
    spawn,
)
from tests.support.rigs import Rig

pytestmark = pytest.mark.timeout(180)


def test_case2_producer_processes_zero_duplicates_zero_losses(rig_file: Rig) -> None:
    url = rig_file.url()
    counts = {f"gen-{i}": 8 + i for i in range(6)}
    counts["gen-empty"] = 0
    names = list(counts)
    producers = [
        spawn(produce, url, names, p, n, delay=0.002, pipe_options={"capacity": 12})
        for p, n in counts.items()
    ]
    try:
        taken = consume(url, names, "trainer", pipe_options={"capacity": 12})
    finally:
        reap(producers)
    assert [p.exitcode for p in producers] == [0] * len(producers)
    assert_exactly_once(taken, counts)


@pytest.mark.slow
def test_case2_fifteen_producers_two_consumer_processes(rig_file: Rig) -> None:
    url = rig_file.url()
    counts = {f"gen-{i}": 30 for i in range(15)}
    names = list(counts)
    results = mp.get_context("spawn").Queue()
    consumers = [spawn(consume_to_queue, url, names, f"trainer-{i}", results) for i in range(2)]
    producers = [spawn(produce, url, names, p, n, delay=0.005) for p, n in counts.items()]
    outcomes = [results.get(timeout=JOIN) for _ in consumers]
    reap(producers + consumers)
    assert [error for _, _, error in outcomes] == [None, None]
    assert_exactly_once([item for _, got, _ in outcomes for item in got], counts)


def test_producer_process_exception_reaches_the_consumer_with_its_traceback(
    rig_file: Rig,
) -> None:
    url = rig_file.url()
    names = ["bad", "good"]
    processes = [
        spawn(produce, url, names, "bad", 20, fail_after=4),
        spawn(produce, url, names, "good", 5),
    ]
    got: list[tuple[str, int]] = []
    with pytest.raises(ProducerFailedError) as caught:
        drain(open_pipe(url, names), got)
    reap(processes)
    assert [s for p, s in got if p == "bad"] == [0, 1, 2, 3]
    assert caught.value.producer == "bad"
    assert "bad broke at item 4" in caught.value.worker_traceback


def _sigkill_run(url: str, kill_after: int) -> tuple[list[tuple[str, int]], BaseException | None]:
    # Backpressure (capacity 8 over 4 producers: 2 unclaimed items each) keeps the victim
    # within a few items of what the consumer has claimed, so it is killed long before its
    # 40th item; the test checks that from the store.
    counts = {f"gen-{i}": 40 for i in range(4)}
    names = list(counts)
    options: dict[str, Any] = {"capacity": 8, "stall_timeout": 30, **FAST}
    producers = {
        p: spawn(produce, url, names, p, n, delay=0.01, pipe_options=options)
        for p, n in counts.items()
    }
    victim = producers["gen-1"]
    taken: list[tuple[str, int]] = []
    error: BaseException | None = None
    try:
        with open_pipe(url, names, **options).consumer("trainer") as items:
            for item in items:
                taken.append(parse(item))
                if sum(p == "gen-1" for p, _ in taken) == kill_after:
                    assert victim.pid is not None
                    os.kill(victim.pid, signal.SIGKILL)
    except ProducerLostError as exc:
        error = exc
    finally:
        reap(list(producers.values()))
    assert victim.exitcode == -signal.SIGKILL
    return taken, error


def test_sigkill_of_a_producer_gives_a_clear_error_never_a_hang(rig_file: Rig) -> None:
    url = rig_file.url()
    taken, error = _sigkill_run(url, kill_after=3)
    assert not [i for i, n in Counter(taken).items() if n > 1], "delivered twice"
    # The kill landed mid-run: the victim stored fewer than its 40 items and never wrote
    # its own end; a consumer declared it lost. (Nothing is stored after a SIGKILL, so the
    # store now shows what it held at the kill.)
    box = from_url(url)
    stored = len(list(box.list("items/gen-1/")))
    assert 3 <= stored < 40, stored
    end = End.read(box, end_key("gen-1"))
    assert end is not None
    assert (end.status, end.token, end.count) == ("lost", None, stored)
    assert isinstance(error, ProducerLostError), "the consumer did not report the lost producer"
    assert error.producer == "gen-1"
    assert "'gen-1'" in str(error)
    assert error.items == stored
    victims = [s for p, s in taken if p == "gen-1"]
    # every item the victim stored was delivered, in order, before the error
    assert victims == list(range(error.items))


# On an emulator, not file://: there a process stopped while one of its threads holds one of
# the store's lock stripes (renewing its lease) holds up the others' writes to that stripe
# (a consumer's lease renewal, a delivery record) until it continues, and this test
# continues it only after a consumer has declared it lost.
@pytest.mark.parametrize("rig_name", ["rig_gcs", pytest.param("rig_azure", marks=pytest.mark.slow)])
def test_a_producer_declared_lost_is_fenced_when_it_wakes_up(
    request: pytest.FixtureRequest, rig_name: str
) -> None:
    """SIGSTOP past the lease, then SIGCONT: its items stop counting and it is told so."""
    rig: Rig = request.getfixturevalue(rig_name)
    url = rig.url()
    names = ["sleepy"]
    report = mp.get_context("spawn").Queue()
    process = spawn(produce_and_report, url, names, "sleepy", 10_000, report, rig.options)
    assert process.pid is not None
    pid = process.pid

    def stop_after_three(got: list[tuple[str, int]]) -> None:
        if len(got) == 3:
            pause_outside_locks(pid)

    taken: list[tuple[str, int]] = []
    pipe = open_pipe(url, names, rig.options, stall_timeout=30, **FAST)
    try:
        with pytest.raises(ProducerLostError) as caught:
            drain(pipe, taken, stop_after_three)
    finally:
        os.kill(pid, signal.SIGCONT)
    outcome = report.get(timeout=JOIN)
    reap([process])
    assert outcome is not None
    assert outcome.startswith("PipelineAbortedError"), outcome
    assert "declared lost" in outcome
    assert caught.value.producer == "sleepy"
    assert [s for _, s in taken] == list(range(caught.value.items))
