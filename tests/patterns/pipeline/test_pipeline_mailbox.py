"""Pipeline, mailbox transport: bytes through a Mailbox, claimed exactly once.

Every test here runs in threads on every backend through the ``rig`` fixture; the tests with
producer processes are in ``test_pipeline_processes.py``.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

import pytest

from gradientmail import (
    AtomicityViolationError,
    ConfigurationError,
    NotSupportedError,
    from_url,
)
from gradientmail._errors import WorkerError
from gradientmail.patterns.pipeline import (
    Pipeline,
    PipelineAbortedError,
    PipelineStalledError,
    ProducerFailedError,
    ProducerRegistrationError,
)
from gradientmail.patterns.pipeline._records import ItemClaim, claim_key, item_key
from tests.support.pipeline_workers import (
    FAST,
    JOIN,
    Boom,
    assert_exactly_once,
    drain,
    open_pipe,
    parse,
    payload,
    produce,
    run_threads,
)
from tests.support.rigs import Rig

pytestmark = pytest.mark.timeout(180)

#: Rigs whose emulator is known to let two conditional creates win now and then (moto).
#: On them a race may end in AtomicityViolationError.
NOT_ATOMIC = {"s3"}


# -- every backend, threads -----------------------------------------------------------------


def _atomicity_violation(exc: BaseException) -> AtomicityViolationError | None:
    """The store's double win behind ``exc`` (raised in the loop, or chained from the
    prefetch thread as a WorkerError), if that is what it is."""
    for candidate in (exc, exc.__cause__):
        if isinstance(candidate, AtomicityViolationError):
            return candidate
    return None


def test_exactly_once_with_several_consumers_on_every_backend(rig: Rig) -> None:
    url = rig.url()
    counts = {"a": 25, "empty": 0, "b": 13}
    names = list(counts)
    results: dict[str, list[tuple[str, int]]] = {}
    violations: list[AtomicityViolationError] = []

    def consumer(name: str) -> None:
        got = results[name] = []
        incarnation = name
        while True:
            try:
                pipe = open_pipe(url, names, rig.options, capacity=6)
                with pipe.consumer(incarnation) as items:
                    for item in items:
                        got.append(parse(item))
                return
            except BaseException as exc:
                violation = _atomicity_violation(exc)
                if violation is None or rig.name not in NOT_ATOMIC:
                    raise
                # The store let two claimants win an item; the claim's read-back caught it
                # instead of delivering it twice. The item is the other winner's; this
                # consumer's prefetched items go to the others as it closed early, and it
                # carries on as a new consumer, as a user's would.
                violations.append(violation)
                incarnation = f"{name}-after-{len(violations)}"

    errors = run_threads(
        *[
            (produce, (url, names, p, n), {"options": rig.options, "pipe_options": {"capacity": 6}})
            for p, n in counts.items()
        ],
        *[(consumer, (f"c{i}",), {}) for i in range(3)],
    )
    assert not errors, errors
    if violations:
        print(f"{rig.name}: {len(violations)} double win(s) caught by the claim read-back")
    # Whatever the store did, nothing is lost and nothing delivered twice.
    assert_exactly_once([item for got in results.values() for item in got], counts)
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
    assert pipe.stats().producers["a"].blocked_s == 0.0, "puts within the share never wait"
    began = time.perf_counter()
    with pytest.raises(PipelineStalledError, match="item #0 is still unclaimed"):
        out.put(payload("a", 2))
    stalled_for = time.perf_counter() - began
    # The stalled put's wait for room is counted, and no longer than the call that stalled.
    blocked = pipe.stats().producers["a"].blocked_s
    assert 0.0 < blocked <= stalled_for, (blocked, stalled_for)
    box = rig.open(url)
    assert len(list(box.list("items/a/"))) == 2
    consumer = open_pipe(url, names, rig.options, capacity=4, prefetch=1).consumer("c")
    assert parse(next(consumer)) == ("a", 0)
    began = time.perf_counter()
    out.put(payload("a", 2))  # item 0 is claimed: room for one more
    put_for = time.perf_counter() - began
    # Its one check for room (item 0's claim, found at once) adds at most that call's time.
    after = pipe.stats().producers["a"].blocked_s
    assert blocked <= after <= blocked + put_for, (blocked, after, put_for)
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


class WatchedClaims:
    """Delegates to a real mailbox; counts reads of one key (the producer's room check)."""

    def __init__(self, inner: Any, key: str) -> None:
        self.inner = inner
        self.key = key
        self.reads = 0
        self.read = threading.Condition()

    def get(self, key: str) -> bytes:
        try:
            return bytes(self.inner.get(key))
        finally:
            if key == self.key:
                with self.read:
                    self.reads += 1
                    self.read.notify_all()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_abort_stops_a_producer_held_by_backpressure(rig: Rig) -> None:
    url = rig.url()
    # capacity 1: item 1 waits until item 0 is claimed, which the producer checks by
    # reading the claim. No consumer runs, so only the abort can end that wait.
    box = WatchedClaims(rig.open(url), claim_key("a", 0))
    pipe = Pipeline.over_mailbox(box, ["a"], capacity=1, stall_timeout=None, **FAST)  # type: ignore[arg-type]
    out = pipe.producer("a")
    out.put(payload("a", 0))
    errors: list[BaseException] = []
    returned = threading.Event()
    held_for: list[float] = []  # the held put's call, measured around it

    def blocked_put() -> None:
        began = time.perf_counter()
        try:
            out.put(payload("a", 1))
            returned.set()
        except BaseException as exc:  # noqa: BLE001 - checked by the test
            errors.append(exc)
        finally:
            held_for.append(time.perf_counter() - began)

    thread = threading.Thread(target=blocked_put, daemon=True)  # daemon: a hang fails, not waits
    thread.start()
    # Abort only once the producer is held: it has found item 0 unclaimed twice (one check,
    # a pause, another), and its put has not returned.
    with box.read:
        assert box.read.wait_for(lambda: box.reads >= 2, timeout=JOIN), "never waited for room"
    assert not returned.is_set()
    assert not errors, errors
    open_pipe(url, ["a"], rig.options, capacity=1).abort("stop now")
    thread.join(JOIN)
    assert not thread.is_alive(), "the producer is still held after the abort"
    assert not returned.is_set(), "the held put went through"
    assert [type(e) for e in errors] == [PipelineAbortedError]
    assert "stop now" in str(errors[0])
    assert list(rig.open(url).list("items/a/")) == [item_key("a", 0)]
    # The wait counted is the held put's, which began before the abort (two room checks
    # were seen first) and ended with it: some time, and no more than the call lasted.
    (call,) = held_for
    assert 0.0 < pipe.stats().producers["a"].blocked_s <= call, (held_for, pipe.stats())


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


def test_an_aborted_producer_refuses_items_and_stops_renewing_its_lease(rig: Rig) -> None:
    url = rig.url()
    pipe = open_pipe(url, ["doomed"], rig.options, **FAST)
    out = pipe.producer("doomed")
    renewer = "gradientmail-lease-doomed"
    threads = [t for t in threading.enumerate() if t.name == renewer]
    assert threads, "the producer renews its lease in a background thread"
    pipe.abort("test")
    step = threading.Event()  # never set: wait(t) stands in for making an item
    with pytest.raises(PipelineAbortedError, match="test"):  # noqa: PT012 - the loop is the producer
        for seq in range(1000):
            out.put(payload("doomed", seq))
            step.wait(0.01)  # the abort record is read once per heartbeat_interval
    for thread in threads:
        thread.join(JOIN)
    assert not [t for t in threads if t.is_alive()]


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
    # The error was raised in the item's place: it counts as delivered, so no other consumer
    # is handed the same undecodable item.
    claim = ItemClaim.read(rig.open(url), claim_key("a", 2))
    assert claim is not None
    assert claim.state == "failed"


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
        if name not in {"get", "get_versioned", "put", "put_if_absent", "put_if_match", "list"}:
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
    # per item: read it, claim it, read the claim back, and swap the claim to delivered when
    # next() returns it; plus a few reads per producer (a claim check when starting, the end
    # record), the manifest, and the consumer's lease (acquire, a renewal or two, its end)
    per_item = (sum(box.calls.values()) - 4 * len(names) - 2 - 6) / len(taken)
    assert per_item <= 4.0, box.calls
