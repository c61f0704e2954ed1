"""Pipeline, mailbox transport: bytes through a Mailbox, claimed exactly once.

Thread-based tests run on every backend through the ``rig`` fixture; the case-2 tests run
real producer processes on ``file://`` (scaled down; the full size is benchmarks/pipeline.py).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from gradientmail import (
    AtomicityViolationError,
    ConfigurationError,
    NotSupportedError,
    from_url,
)
from gradientmail.patterns.common import WorkerError
from gradientmail.patterns.pipeline import (
    Pipeline,
    PipelineAbortedError,
    PipelineStalledError,
    ProducerFailedError,
    ProducerLostError,
    ProducerRegistrationError,
)
from tests.rigs import Rig

pytestmark = pytest.mark.timeout(180)

JOIN = 60.0
#: Rigs whose emulator is known to let two conditional creates win now and then
#: (../shared/EMULATORS.md: moto). On them a race may end in AtomicityViolationError.
NOT_ATOMIC = {"s3"}
#: Quick failure detection for tests: a beat every 0.1 s, lost after 3 s of silence (a margin
#: for a loaded 2-core machine, where a live heartbeat thread can be late).
FAST = {"heartbeat_interval": 0.1, "lease": 3.0, "poll_interval": 0.01}


class Boom(RuntimeError):
    pass


def payload(producer: str, seq: int) -> bytes:
    return f"{producer}/{seq}|".encode() + bytes(seq % 251 for _ in range(64))


def parse(item: bytes) -> tuple[str, int]:
    head = item.split(b"|", 1)[0].decode()
    producer, seq = head.split("/")
    assert item == payload(producer, int(seq)), "the bytes arrived intact"
    return producer, int(seq)


def open_pipe(url: str, names: list[str], options: dict[str, Any] | None = None, **kw: Any) -> Any:
    return Pipeline.over_mailbox(from_url(url, **(options or {})), names, **kw)


# -- workers (module level, so spawned processes can import them) ---------------------------


def produce(
    url: str,
    names: list[str],
    name: str,
    count: int,
    *,
    options: dict[str, Any] | None = None,
    delay: float = 0.0,
    fail_after: int | None = None,
    pipe_options: dict[str, Any] | None = None,
) -> None:
    """One producer: ``count`` items, ``delay`` seconds of simulated work before each."""
    pipe = open_pipe(url, names, options, **(pipe_options or {}))
    with pipe.producer(name) as out:
        for seq in range(count):
            if fail_after is not None and seq == fail_after:
                raise Boom(f"{name} broke at item {seq}")
            if delay:
                time.sleep(delay)  # stands in for generating a chunk
            out.put(payload(name, seq))


def consume(
    url: str,
    names: list[str],
    consumer: str,
    options: dict[str, Any] | None = None,
    pipe_options: dict[str, Any] | None = None,
) -> list[tuple[str, int]]:
    pipe = open_pipe(url, names, options, **(pipe_options or {}))
    with pipe.consumer(consumer) as items:
        return [parse(item) for item in items]


def drain(
    pipe: Pipeline[bytes],
    got: list[tuple[str, int]],
    on_item: Callable[[list[tuple[str, int]]], None] = lambda got: None,
) -> None:
    """Consume into ``got``, so that what arrived before an error can be checked."""
    with pipe.consumer("c") as items:
        for item in items:
            got.append(parse(item))
            on_item(got)


def _consume_to_queue(url: str, names: list[str], consumer: str, out: Any) -> None:
    try:
        out.put((consumer, consume(url, names, consumer), None))
    except BaseException as exc:  # noqa: BLE001 - reported to the test as text
        out.put((consumer, [], f"{type(exc).__name__}: {exc}"))


def _spawn(target: Any, *args: Any, **kwargs: Any) -> mp.process.BaseProcess:
    process = mp.get_context("spawn").Process(target=target, args=args, kwargs=kwargs)
    process.start()
    return process


def _reap(processes: list[mp.process.BaseProcess]) -> None:
    for process in processes:
        process.join(JOIN)
    alive = [p.name for p in processes if p.is_alive()]
    for process in processes:
        if process.is_alive():
            process.kill()
            process.join()
    assert not alive, f"processes still running (a hang): {alive}"


def _threads(*targets: tuple[Any, tuple[Any, ...], dict[str, Any]]) -> list[BaseException]:
    errors: list[BaseException] = []

    def run(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        try:
            fn(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    threads = [threading.Thread(target=run, args=t) for t in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(JOIN)
    assert not [t for t in threads if t.is_alive()], "a thread hung"
    return errors


def assert_exactly_once(taken: list[tuple[str, int]], counts: dict[str, int]) -> None:
    duplicates = [item for item, n in Counter(taken).items() if n > 1]
    assert not duplicates, f"delivered twice: {duplicates[:5]}"
    expected = {(p, s) for p, n in counts.items() for s in range(n)}
    missing = expected - set(taken)
    assert not missing, f"lost: {sorted(missing)[:5]} ({len(missing)} in all)"
    assert set(taken) == expected


# -- every backend, threads -----------------------------------------------------------------


def test_exactly_once_with_several_consumers_on_every_backend(rig: Rig) -> None:
    url = rig.url()
    counts = {"a": 25, "empty": 0, "b": 13}
    names = list(counts)
    results: dict[str, list[tuple[str, int]]] = {}

    def consumer(name: str) -> None:
        got = results[name] = []
        with open_pipe(url, names, rig.options, capacity=6).consumer(name) as items:
            for item in items:
                got.append(parse(item))

    errors = _threads(
        *[
            (produce, (url, names, p, n), {"options": rig.options, "pipe_options": {"capacity": 6}})
            for p, n in counts.items()
        ],
        *[(consumer, (f"c{i}",), {}) for i in range(3)],
    )
    taken = [item for got in results.values() for item in got]
    if errors and rig.name in NOT_ATOMIC:
        # The store let two claimants win; the claim's read-back must catch it, so that
        # nothing is delivered twice.
        # (it reaches the loop as a WorkerError from the prefetch thread, chained)
        caught = [e if isinstance(e, AtomicityViolationError) else e.__cause__ for e in errors]
        assert all(isinstance(e, AtomicityViolationError) for e in caught), errors
        assert not [i for i, n in Counter(taken).items() if n > 1], "delivered twice"
        return
    assert not errors, errors
    assert_exactly_once(taken, counts)
    for got in results.values():
        # each consumer sees one producer's items in order (the cursor never goes back)
        for producer in counts:
            seqs = [s for p, s in got if p == producer]
            assert seqs == sorted(seqs)


def test_producer_exception_reaches_the_consumer_after_its_items(rig: Rig) -> None:
    url = rig.url()
    names = ["bad", "idle"]
    with pytest.raises(Boom):
        produce(url, names, "bad", 10, options=rig.options, fail_after=3)
    open_pipe(url, names, rig.options).producer("idle").done()
    got: list[tuple[str, int]] = []
    with pytest.raises(ProducerFailedError) as caught:
        drain(open_pipe(url, names, rig.options), got)
    assert got == [("bad", 0), ("bad", 1), ("bad", 2)]
    error = caught.value
    assert error.producer == "bad"
    assert error.items == 3
    assert "Boom" in error.error_type
    assert "bad broke at item 3" in str(error)
    assert "raise Boom" in error.worker_traceback, "the producer's traceback, as text"


def test_backpressure_bounds_each_producers_unclaimed_items(rig: Rig) -> None:
    url = rig.url()
    names = ["a", "b"]  # capacity 4 over 2 producers: each may be 2 items ahead
    pipe = open_pipe(url, names, rig.options, capacity=4, stall_timeout=0.3, **FAST)
    out = pipe.producer("a")
    out.put(payload("a", 0))
    out.put(payload("a", 1))
    with pytest.raises(PipelineStalledError, match="item #0 is still unclaimed"):
        out.put(payload("a", 2))
    box = from_url(url, **(rig.options or {}))
    assert len(list(box.list("items/a/"))) == 2
    consumer = open_pipe(url, names, rig.options, capacity=4, prefetch=1).consumer("c")
    assert parse(next(consumer)) == ("a", 0)
    out.put(payload("a", 2))  # item 0 is claimed: room for one more
    assert pipe.stats().producers["a"].blocked_s >= 0.3
    consumer.close()
    out.done()


def test_a_consumer_stalls_with_a_clear_error_when_a_producer_never_registers(rig: Rig) -> None:
    url = rig.url()
    names = ["present", "absent"]
    open_pipe(url, names, rig.options).producer("present").done()
    pipe = open_pipe(url, names, rig.options, stall_timeout=0.3, **FAST)
    with (
        pytest.raises(PipelineStalledError, match=r"absent \(not registered"),
        pipe.consumer() as c,
    ):
        next(c)


def test_registration_is_once_per_declared_id_across_handles(rig: Rig) -> None:
    url = rig.url()
    first = open_pipe(url, ["a"], rig.options)
    second = open_pipe(url, ["a"], rig.options)
    producer = first.producer("a")
    with pytest.raises(ProducerRegistrationError, match="already registered"):
        second.producer("a")
    with pytest.raises(ProducerRegistrationError, match="not declared"):
        second.producer("b")
    producer.done()


def test_handles_must_declare_the_same_pipeline(rig: Rig) -> None:
    url = rig.url()
    open_pipe(url, ["a", "b"], rig.options, capacity=4)
    with pytest.raises(ConfigurationError, match="same producers and capacity"):
        open_pipe(url, ["a"], rig.options, capacity=4)
    with pytest.raises(ConfigurationError, match="same producers and capacity"):
        open_pipe(url, ["a", "b"], rig.options, capacity=5)


def test_abort_stops_a_producer_held_by_backpressure(rig: Rig) -> None:
    url = rig.url()
    pipe = open_pipe(url, ["a"], rig.options, capacity=1, stall_timeout=30, **FAST)
    out = pipe.producer("a")
    out.put(payload("a", 0))
    errors = _threads(
        (out.put, (payload("a", 1),), {}),
        (open_pipe(url, ["a"], rig.options, capacity=1).abort, ("stop now",), {}),
    )
    assert [type(e) for e in errors] == [PipelineAbortedError]
    assert "stop now" in str(errors[0])


# -- case 2: producer processes on file:// --------------------------------------------------


def test_case2_producer_processes_zero_duplicates_zero_losses(rig_file: Rig) -> None:
    url = rig_file.url()
    counts = {f"gen-{i}": 8 + i for i in range(6)}
    counts["gen-empty"] = 0
    names = list(counts)
    producers = [
        _spawn(produce, url, names, p, n, delay=0.002, pipe_options={"capacity": 12})
        for p, n in counts.items()
    ]
    try:
        taken = consume(url, names, "trainer", pipe_options={"capacity": 12})
    finally:
        _reap(producers)
    assert [p.exitcode for p in producers] == [0] * len(producers)
    assert_exactly_once(taken, counts)


@pytest.mark.slow
def test_case2_fifteen_producers_two_consumer_processes(rig_file: Rig) -> None:
    url = rig_file.url()
    counts = {f"gen-{i}": 30 for i in range(15)}
    names = list(counts)
    results = mp.get_context("spawn").Queue()
    consumers = [_spawn(_consume_to_queue, url, names, f"trainer-{i}", results) for i in range(2)]
    producers = [_spawn(produce, url, names, p, n, delay=0.005) for p, n in counts.items()]
    outcomes = [results.get(timeout=JOIN) for _ in consumers]
    _reap(producers + consumers)
    assert [error for _, _, error in outcomes] == [None, None]
    assert_exactly_once([item for _, got, _ in outcomes for item in got], counts)


def test_producer_process_exception_reaches_the_consumer_with_its_traceback(
    rig_file: Rig,
) -> None:
    url = rig_file.url()
    names = ["bad", "good"]
    processes = [
        _spawn(produce, url, names, "bad", 20, fail_after=4),
        _spawn(produce, url, names, "good", 5),
    ]
    got: list[tuple[str, int]] = []
    with pytest.raises(ProducerFailedError) as caught:
        drain(open_pipe(url, names), got)
    _reap(processes)
    assert [s for p, s in got if p == "bad"] == [0, 1, 2, 3]
    assert caught.value.producer == "bad"
    assert "bad broke at item 4" in caught.value.worker_traceback


def _sigkill_run(url: str, kill_after: int) -> tuple[list[tuple[str, int]], BaseException | None]:
    counts = {f"gen-{i}": 40 for i in range(4)}
    names = list(counts)
    options = {"capacity": 8, "stall_timeout": 30, **FAST}
    producers = {
        p: _spawn(produce, url, names, p, n, delay=0.01, pipe_options=options)
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
        _reap(list(producers.values()))
    assert victim.exitcode == -signal.SIGKILL
    return taken, error


def test_sigkill_of_a_producer_gives_a_clear_error_never_a_hang(rig_file: Rig) -> None:
    taken, error = _sigkill_run(rig_file.url(), kill_after=3)
    assert not [i for i, n in Counter(taken).items() if n > 1], "delivered twice"
    if error is None:  # the victim had finished before the signal landed: a complete run
        assert_exactly_once(taken, {f"gen-{i}": 40 for i in range(4)})
        return
    assert isinstance(error, ProducerLostError)
    assert error.producer == "gen-1"
    assert "'gen-1'" in str(error)
    victims = [s for p, s in taken if p == "gen-1"]
    # every item the victim stored was delivered, in order, before the error
    assert victims == list(range(error.items))
    assert error.items >= 3


def _produce_and_report(url: str, names: list[str], name: str, count: int, out: Any) -> None:
    try:
        produce(url, names, name, count, delay=0.02, pipe_options={"stall_timeout": 30, **FAST})
        out.put(None)
    except BaseException as exc:  # noqa: BLE001 - reported to the test
        out.put(f"{type(exc).__name__}: {exc}")


def test_a_producer_declared_lost_is_fenced_when_it_wakes_up(rig_file: Rig) -> None:
    """SIGSTOP past the lease, then SIGCONT: its items stop counting and it is told so."""
    url = rig_file.url()
    names = ["sleepy"]
    report = mp.get_context("spawn").Queue()
    process = _spawn(_produce_and_report, url, names, "sleepy", 10_000, report)
    assert process.pid is not None
    pid = process.pid

    def stop_after_three(got: list[tuple[str, int]]) -> None:
        if len(got) == 3:
            os.kill(pid, signal.SIGSTOP)

    taken: list[tuple[str, int]] = []
    try:
        with pytest.raises(ProducerLostError) as caught:
            drain(open_pipe(url, names, stall_timeout=30, **FAST), taken, stop_after_three)
    finally:
        os.kill(pid, signal.SIGCONT)
    outcome = report.get(timeout=JOIN)
    _reap([process])
    assert outcome is not None
    assert outcome.startswith("PipelineAbortedError"), outcome
    assert "declared lost" in outcome
    assert caught.value.producer == "sleepy"
    assert [s for _, s in taken] == list(range(caught.value.items))


def test_leaving_early_stops_the_threads(rig: Rig) -> None:
    url = rig.url()
    pipe = open_pipe(url, ["early"], rig.options, **FAST)
    out = pipe.producer("early")
    for seq in range(3):
        out.put(payload("early", seq))
    with pipe.consumer("early-c") as items:
        assert parse(next(items)) == ("early", 0)
    out.done()
    left = [t.name for t in threading.enumerate() if t.name.endswith(("-early", "-early-c"))]
    assert not left, f"threads left running: {left}"


def test_an_aborted_producer_stops_heartbeating(rig: Rig) -> None:
    url = rig.url()
    pipe = open_pipe(url, ["doomed"], rig.options, **FAST)
    out = pipe.producer("doomed")
    pipe.abort("test")
    beat = "gradientmail-heartbeat-doomed"
    threads = [t for t in threading.enumerate() if t.name == beat]
    for thread in threads:
        thread.join(JOIN)
    assert threads
    assert not [t for t in threads if t.is_alive()]
    with pytest.raises(PipelineAbortedError, match="test"):
        out.put(b"too late")


def test_decode_runs_ahead_and_its_errors_arrive_after_earlier_items(rig: Rig) -> None:
    url = rig.url()
    names = ["a"]
    pipe = open_pipe(url, names, rig.options)
    with pipe.producer("a") as out:
        for seq in range(4):
            out.put(payload("a", seq))
    consumer_threads: list[str] = []

    def decode(data: bytes) -> tuple[str, int]:
        consumer_threads.append(threading.current_thread().name)
        producer, seq = parse(data)
        if seq == 2:
            raise ValueError("cannot decode item 2")
        return producer, seq

    got: list[tuple[str, int]] = []
    with pytest.raises(WorkerError) as caught, pipe.consumer("c", decode=decode) as items:
        got.extend(items)  # extend keeps what arrived before the error
    assert got == [("a", 0), ("a", 1)]
    assert isinstance(caught.value.__cause__, ValueError)
    assert "cannot decode item 2" in caught.value.worker_traceback
    assert set(consumer_threads) == {"gradientmail-consumer-c"}, "decoded in the prefetch thread"


def test_abort_reaches_a_busy_consumer(rig: Rig) -> None:
    url = rig.url()
    pipe = open_pipe(url, ["a"], rig.options, capacity=64, **FAST)
    with pipe.producer("a") as out:
        for seq in range(20):
            out.put(payload("a", seq))
    step = threading.Event()  # never set: wait(t) stands in for a training step

    def train(got: list[tuple[str, int]]) -> None:
        if len(got) == 1:
            pipe.abort("stop the run")
        step.wait(0.15)  # longer than heartbeat_interval, the consumer's abort check

    got: list[tuple[str, int]] = []
    with pytest.raises(PipelineAbortedError, match="stop the run"):
        drain(open_pipe(url, ["a"], rig.options, capacity=64, **FAST), got, train)
    # what was prefetched before the abort was seen (prefetch=2) still arrives, no more
    assert len(got) <= 6


def test_a_mailbox_without_atomic_create_is_refused() -> None:
    from gradientmail.backends.memory import MemoryMailbox

    class NotAtomic(MemoryMailbox):
        capabilities = frozenset()

    with pytest.raises(NotSupportedError, match="ATOMIC_CREATE"):
        Pipeline.over_mailbox(NotAtomic("not-atomic"), ["a"])


class CountingMailbox:
    """Delegates to a real mailbox and counts calls by method name."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls: Counter[str] = Counter()
        self.lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self.inner, name)
        if name not in {"get", "put", "put_if_absent", "list", "delete"}:
            return attribute

        def counted(*args: Any, **kwargs: Any) -> Any:
            with self.lock:
                self.calls[name] += 1
            return attribute(*args, **kwargs)

        return counted


def test_store_calls_per_item_stay_flat_and_nothing_is_listed(rig_file: Rig) -> None:
    url = rig_file.url()
    names = ["a", "b"]
    for name, count in (("a", 60), ("b", 40)):
        produce(url, names, name, count, pipe_options={"capacity": 200})
    box = CountingMailbox(from_url(url))
    pipe = Pipeline.over_mailbox(box, names, capacity=200)  # type: ignore[arg-type]
    with pipe.consumer("c") as items:
        taken = [parse(item) for item in items]
    assert len(taken) == 100
    assert box.calls["list"] == 0, "a consumer never lists"
    # per item: read it, claim it, read the claim back; plus a few reads per producer
    # (a claim check when starting, the end record) and the manifest
    per_item = (sum(box.calls.values()) - 4 * len(names) - 2) / len(taken)
    assert per_item <= 3.0, box.calls
