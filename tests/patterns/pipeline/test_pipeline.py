"""Pipeline, in-process transport: case 1 (5 producers feeding 3 consumers between threads).

Mailbox-transport tests live in ``test_pipeline_mailbox.py``.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from gradientmail import ConfigurationError, InvalidKeyError
from gradientmail.patterns.pipeline import (
    Pipeline,
    PipelineAbortedError,
    PipelineError,
    PipelineStalledError,
    ProducerFailedError,
    ProducerRegistrationError,
)
from gradientmail.patterns.pipeline._in_process import EntryBuffer

pytestmark = pytest.mark.timeout(120)

JOIN = 30.0  # seconds; a thread still alive after this is a hang


def _join(threads: list[threading.Thread]) -> None:
    for thread in threads:
        thread.join(JOIN)
    hung = [t.name for t in threads if t.is_alive()]
    assert not hung, f"threads still running (a hang): {hung}"


class Token:
    """Stands in for a GPU tensor: identity matters, it is never copied."""

    def __init__(self, producer: str, seq: int) -> None:
        self.producer = producer
        self.seq = seq


@dataclass
class Run:
    """What one case-1 run observed."""

    produced: list[Token] = field(default_factory=list)
    consumed: dict[str, list[Token]] = field(default_factory=dict)
    errors: list[BaseException] = field(default_factory=list)
    #: a global order of events: ("put", n) after each put, ("exit", consumer) at StopIteration
    events: list[tuple[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, kind: str, value: Any) -> None:
        with self.lock:
            self.events.append((kind, value))


def run_case1(
    pipe: Pipeline[Any],
    counts: dict[str, int],
    *,
    consumers: int = 3,
    produce_time: Callable[[str], float] = lambda p: 0.0,
    consume_time: float = 0.0,
    before_start: Callable[[str], None] = lambda p: None,
    on_item: Callable[[Any], None] = lambda item: None,
) -> Run:
    """Producers (one thread each) put Tokens; consumers (threads) take them."""
    run = Run()
    sleeper = threading.Event()  # never set: wait(t) stands in for t seconds of GPU work

    def produce(name: str) -> None:
        try:
            before_start(name)
            with pipe.producer(name) as out:
                for seq in range(counts[name]):
                    if produce_time(name):
                        sleeper.wait(produce_time(name))
                    token = Token(name, seq)
                    out.put(token)
                    with run.lock:
                        run.produced.append(token)
                        run.events.append(("put", token))
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            run.errors.append(exc)

    def consume(name: str) -> None:
        mine: list[Token] = []
        run.consumed[name] = mine
        try:
            with pipe.consumer(name) as items:
                for item in items:
                    mine.append(item)
                    on_item(item)
                    if consume_time:
                        sleeper.wait(consume_time)
            run.record("exit", name)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            run.errors.append(exc)

    threads = [threading.Thread(target=produce, args=(p,), name=f"producer-{p}") for p in counts]
    threads += [
        threading.Thread(target=consume, args=(f"c{i}",), name=f"consumer-c{i}")
        for i in range(consumers)
    ]
    for thread in threads:
        thread.start()
    _join(threads)
    return run


def assert_exactly_once(run: Run) -> None:
    taken = [token for tokens in run.consumed.values() for token in tokens]
    ids = Counter(id(token) for token in taken)
    assert not [i for i, n in ids.items() if n > 1], "an item was delivered twice"
    assert len(taken) == len(run.produced), (
        f"{len(run.produced)} items produced, {len(taken)} consumed"
    )
    # By reference: the very objects put are the ones taken.
    assert {id(t) for t in taken} == {id(t) for t in run.produced}


def assert_exits_after_last_item(run: Run) -> None:
    last_put = max((i for i, (kind, _) in enumerate(run.events) if kind == "put"), default=-1)
    exits = [i for i, (kind, _) in enumerate(run.events) if kind == "exit"]
    assert exits, "no consumer exited"
    assert min(exits) > last_put, "a consumer exited before the last item was put"


RATES = {"t0": 0.002, "t1": 0.003, "t2": 0.004, "t3": 0.006, "t4": 0.008}


def watch_handoffs(pipe: Pipeline[Any]) -> Counter[str]:
    """Count, at each hand-off, whether a consumer could idle beside a buffered item.

    The in-process transport's buffer and its queue of waiting consumers are replaced by
    ones that look at each other on every append, under the transport's lock (every append
    happens under it): a consumer that starts to wait while an item is buffered, or an item
    buffered while a consumer waits, is a consumer idling beside work, however short.
    """
    core = pipe._transport
    seen: Counter[str] = Counter()

    class Buffer(EntryBuffer):
        def append(self, entry: Any, now: float) -> None:
            seen["buffered"] += 1
            if core.waiters:
                seen["buffered while a consumer waited"] += 1
            super().append(entry, now)

    class Waiters(deque[Any]):
        def append(self, waiter: Any) -> None:
            seen["waits"] += 1
            if core.buffer:
                seen["waits begun beside a buffered item"] += 1
            super().append(waiter)

    assert not core.buffer, "watch a pipeline before it is used"
    assert not core.waiters, "watch a pipeline before it is used"
    core.buffer, core.waiters = Buffer(), Waiters()
    return seen


def test_case1_exactly_once_no_idle_consumer_and_clean_exit() -> None:
    """5 producers at different rates, 3 consumers: exactly once, nobody idles beside work."""
    pipe = Pipeline.in_process(list(RATES), capacity=8, stall_timeout=30)
    seen = watch_handoffs(pipe)
    counts = dict.fromkeys(RATES, 60)  # equal counts at unequal rates: staggered finishes
    run = run_case1(pipe, counts, produce_time=RATES.__getitem__, consume_time=0.004)
    assert not run.errors, run.errors
    assert_exactly_once(run)
    assert_exits_after_last_item(run)
    stats = pipe.stats()
    assert stats.produced == stats.consumed == sum(counts.values())
    assert {p: s.items for p, s in stats.producers.items()} == counts
    # No consumer ever waited while an item sat in the buffer, counted at every hand-off
    # (how long such idling lasts, as a share of the run, is benchmarks/pipeline.py's
    # case 1). Both paths ran: consumers waited, and items were buffered.
    assert seen["waits begun beside a buffered item"] == 0, seen
    assert seen["buffered while a consumer waited"] == 0, seen
    assert seen["waits"] > 0, seen
    assert seen["buffered"] > 0, seen
    for name, consumer in stats.consumers.items():
        idle = consumer.idle_while_available_s
        assert idle is not None, f"{name}: measured in process"
        assert idle >= 0.0, f"{name}: {idle}"
        assert consumer.items > 0, f"{name} got nothing"


def test_consumers_keep_waiting_after_early_finishers_and_a_zero_item_producer() -> None:
    """Everyone but the last producer is done and the buffer is empty: consumers must wait."""
    pipe = Pipeline.in_process(["empty", "early", "late"], capacity=4, stall_timeout=30)
    taken = itertools.count(1)
    drained = threading.Event()

    def on_item(_: Any) -> None:
        if next(taken) == 5:  # the early producer's 5 items are all taken
            drained.set()

    def hold_late(name: str) -> None:
        if name == "late":
            # "empty" and "early" are done and every item is taken: a naive done-counter
            # or sentinel protocol lets consumers leave now. Only then does "late" start.
            assert drained.wait(JOIN)

    run = run_case1(
        pipe, {"empty": 0, "early": 5, "late": 7}, before_start=hold_late, on_item=on_item
    )
    assert not run.errors, run.errors
    assert_exactly_once(run)
    assert_exits_after_last_item(run)
    assert len(run.produced) == 12


@pytest.mark.parametrize("capacity", [1, 2, 64])
def test_two_hundred_fast_runs_shake_out_shutdown_races(capacity: int) -> None:
    """No work between steps, so finishing and taking interleave as tightly as they can."""
    for attempt in range(200 if capacity == 2 else 50):
        names = [f"p{i}" for i in range(5)]
        counts = {p: (attempt + i) % 4 for i, p in enumerate(names)}  # some produce nothing
        pipe = Pipeline.in_process(names, capacity=capacity, stall_timeout=30)
        run = run_case1(pipe, counts)
        assert not run.errors, (attempt, run.errors)
        assert_exactly_once(run)
        assert_exits_after_last_item(run)


def test_all_consumers_stop_when_every_producer_is_done() -> None:
    pipe = Pipeline.in_process(["a", "b"], stall_timeout=30)
    run = run_case1(pipe, {"a": 0, "b": 0}, consumers=4)
    assert not run.errors
    assert sorted(v for kind, v in run.events if kind == "exit") == ["c0", "c1", "c2", "c3"]


def test_items_travel_by_reference() -> None:
    pipe = Pipeline.in_process(["p"], stall_timeout=30)
    payload = bytearray(b"not copied")
    with pipe.producer("p") as out:
        out.put(payload)
    (item,) = list(pipe.consumer())
    assert item is payload


# -- failures -------------------------------------------------------------------------------


class Boom(RuntimeError):
    pass


def failing_producer(pipe: Pipeline[Any], name: str, good: int) -> None:
    with pipe.producer(name) as out:
        for seq in range(good):
            out.put((name, seq))
        raise Boom(f"{name} broke after {good}")


def test_producer_exception_reaches_the_consumer_after_its_items() -> None:
    pipe = Pipeline.in_process(["ok", "bad"], capacity=16, stall_timeout=30)
    with pytest.raises(Boom):
        failing_producer(pipe, "bad", 3)
    got: list[Any] = []
    with pytest.raises(ProducerFailedError) as caught:
        got.extend(pipe.consumer())  # extend keeps what arrived before the error
    assert got == [("bad", 0), ("bad", 1), ("bad", 2)]
    error = caught.value
    assert error.producer == "bad"
    assert error.items == 3
    assert "'bad'" in str(error)
    assert isinstance(error.__cause__, Boom), "the original exception is chained"
    assert "bad broke after 3" in error.worker_traceback
    assert "failing_producer" in error.worker_traceback, "the producer's traceback as text"


def test_a_failure_reaches_every_consumer_and_stops_the_producers() -> None:
    pipe = Pipeline.in_process(["bad", "busy"], capacity=2, stall_timeout=30)
    errors: list[BaseException] = []
    first_item_taken = threading.Event()

    def busy() -> None:
        try:
            with pipe.producer("busy") as out:
                for seq in itertools.count():
                    out.put(("busy", seq))  # blocks on the full buffer until aborted
        except PipelineAbortedError as exc:
            errors.append(exc)

    def consume(name: str) -> None:
        try:
            for _ in pipe.consumer(name):
                first_item_taken.set()
        except ProducerFailedError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=busy)]
    threads += [threading.Thread(target=consume, args=(f"c{i}",)) for i in range(3)]
    for thread in threads:
        thread.start()
    assert first_item_taken.wait(JOIN)
    with pytest.raises(Boom):
        failing_producer(pipe, "bad", 2)
    _join(threads)
    kinds = Counter(type(e).__name__ for e in errors)
    assert kinds == {"ProducerFailedError": 3, "PipelineAbortedError": 1}, errors
    assert all(e.producer == "bad" for e in errors if isinstance(e, ProducerFailedError))


def test_stall_timeout_names_the_unfinished_producers() -> None:
    pipe = Pipeline.in_process(["quiet", "done"], stall_timeout=0.2)
    pipe.producer("done").done()
    pipe.producer("quiet")  # registered, never puts, never finishes
    with pytest.raises(PipelineStalledError, match=r"not finished: quiet \(registered\)$"):
        next(pipe.consumer())


def test_backpressure_holds_the_producer_at_capacity() -> None:
    pipe = Pipeline.in_process(["p"], capacity=3, stall_timeout=0.2)
    out = pipe.producer("p")
    for seq in range(3):
        out.put(seq)
    assert pipe.stats().producers["p"].blocked_s == 0.0, "a put that found room never blocks"
    began = time.perf_counter()
    with pytest.raises(PipelineStalledError, match="3 items are buffered"):
        out.put(3)
    stalled_for = time.perf_counter() - began
    # The stalled put's wait is counted, and it is no longer than the call that stalled.
    blocked = pipe.stats().producers["p"].blocked_s
    assert 0.0 < blocked <= stalled_for, (blocked, stalled_for)
    consumer = pipe.consumer()
    assert next(consumer) == 0
    out.put(3)  # room again
    assert pipe.stats().producers["p"].blocked_s == blocked, "the put that found room waited"
    out.done()
    assert list(consumer) == [1, 2, 3]


def test_a_blocked_producer_resumes_when_a_consumer_takes_an_item() -> None:
    pipe = Pipeline.in_process(["p"], capacity=1, stall_timeout=30)
    produced: list[int] = []

    def produce() -> None:
        with pipe.producer("p") as out:
            for seq in range(50):
                out.put(seq)
                produced.append(seq)

    thread = threading.Thread(target=produce)
    thread.start()
    seen: list[object] = []
    for item in pipe.consumer():
        # capacity 1: the producer can be at most one item ahead of what we have taken
        assert len(produced) <= len(seen) + 2
        seen.append(item)
    _join([thread])
    assert seen == list(range(50))


class AnnouncedCondition(threading.Condition):
    """A condition that announces each wait, so a test knows a thread is about to block.

    ``wait`` is entered holding the lock and releases it only by waiting, so anything that
    needs the lock after the announcement runs while the waiter is blocked.
    """

    def __init__(self, lock: Any) -> None:
        super().__init__(lock)
        self.waiting = threading.Event()

    def wait(self, timeout: float | None = None) -> bool:
        self.waiting.set()
        return super().wait(timeout)


def test_abort_stops_consumers_and_blocked_producers() -> None:
    # No stall timeout: only the abort can end the producer's wait.
    pipe = Pipeline.in_process(["p"], capacity=1, stall_timeout=None)
    core = pipe._transport  # type: ignore[attr-defined]
    core.not_full = backpressure = AnnouncedCondition(core.lock)
    out = pipe.producer("p")
    out.put(0)
    errors: list[BaseException] = []
    returned = threading.Event()

    def blocked_put() -> None:
        try:
            out.put(1)
            returned.set()
        except PipelineAbortedError as exc:
            errors.append(exc)

    thread = threading.Thread(target=blocked_put, daemon=True)  # daemon: a hang fails, not waits
    thread.start()
    # Abort only once the producer waits for room: abort() takes the lock the producer
    # gives up only by waiting, so the abort reaches a producer that is blocked.
    assert backpressure.waiting.wait(JOIN), "the producer never waited for room"
    assert thread.is_alive()
    assert not returned.is_set()
    pipe.abort("operator said stop")
    _join([thread])
    assert not returned.is_set(), "the blocked put went through"
    assert len(errors) == 1
    assert "operator said stop" in str(errors[0])
    assert pipe.stats().producers["p"].items == 1
    with pytest.raises(PipelineAbortedError, match="operator said stop"):
        next(pipe.consumer())


# -- registration and configuration ---------------------------------------------------------


def test_late_registration_is_refused_with_a_clear_error() -> None:
    pipe = Pipeline.in_process(["a"])
    with pytest.raises(ProducerRegistrationError, match="not declared"):
        pipe.producer("b")
    pipe.producer("a").done()
    with pytest.raises(ProducerRegistrationError, match="already registered"):
        pipe.producer("a")


def test_put_after_done_raises() -> None:
    pipe = Pipeline.in_process(["a"])
    out = pipe.producer("a")
    out.done()
    with pytest.raises(PipelineError, match="already finished"):
        out.put(1)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"producers": []}, "at least one"),
        ({"producers": "abc"}, "not the string"),
        ({"producers": ["a", "a"]}, "unique"),
        ({"producers": ["a/b"]}, "not a valid id"),
        ({"producers": ["a"], "capacity": 0}, "capacity"),
        ({"producers": ["a"], "stall_timeout": -1}, "stall_timeout"),
    ],
)
def test_bad_configuration_is_refused(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        Pipeline.in_process(**kwargs)


def test_decode_is_applied_to_each_item() -> None:
    pipe = Pipeline.in_process(["p"], stall_timeout=30)
    with pipe.producer("p") as out:
        out.put(2)
        out.put(3)
    assert list(pipe.consumer(decode=lambda n: n * 10)) == [20, 30]


# -- ids and public names -------------------------------------------------------------------

#: Valid under gradientmail's one ID rule (keys.validate_segment); the pipeline's own rule
#: (ASCII letters, digits, '.', '_', '-', starting with a letter or digit, at most 128
#: characters) refused each of these before.
NEWLY_VALID_IDS = ["nœud-1", ".hidden", "_private", "-dash", "with space", "x" * 200]
#: Invalid under the one rule: a '/', a backslash, control characters, '.', '..', empty.
INVALID_IDS: list[object] = ["a/b", "a\\b", "tab\there", "nul\x00", ".", "..", "", 7]


@pytest.mark.parametrize("name", NEWLY_VALID_IDS)
def test_ids_follow_the_one_id_rule(name: str) -> None:
    pipe = Pipeline.in_process([name, "other"], stall_timeout=30)
    with pipe.producer(name) as out:
        out.put("item")
    pipe.producer("other").done()
    with pipe.consumer(name) as items:
        assert list(items) == ["item"]
    assert set(pipe.stats().consumers) == {name}


@pytest.mark.parametrize("name", INVALID_IDS)
def test_an_invalid_id_is_refused_with_the_rule_it_breaks(name: object) -> None:
    with pytest.raises(ConfigurationError, match="not a valid id") as declared:
        Pipeline.in_process([name])  # type: ignore[list-item]  # a bad id on purpose
    assert isinstance(declared.value.__cause__, InvalidKeyError), "the rule is chained"
    pipe = Pipeline.in_process(["p"])
    with pytest.raises(ConfigurationError, match="producer id"):
        pipe.producer(name)  # type: ignore[arg-type]  # a bad id on purpose
    with pytest.raises(ConfigurationError, match="consumer id"):
        pipe.consumer(name)  # type: ignore[arg-type]  # a bad id on purpose


def test_the_default_consumer_id_is_valid_and_unique_per_handle() -> None:
    pipe = Pipeline.in_process(["p"])
    first, second = pipe.consumer(), pipe.consumer()
    assert first.id != second.id
    assert set(pipe.stats().consumers) == {first.id, second.id}


def test_every_public_name_is_importable_from_the_package() -> None:
    import gradientmail._errors as errors
    import gradientmail.patterns.pipeline as pipeline

    # The names users import from here (a guard: dropping one breaks their code).
    expected = """Consumer ConsumerStats Pipeline PipelineAbortedError PipelineError
        PipelineStalledError PipelineStats Producer ProducerFailedError ProducerLostError
        ProducerRegistrationError ProducerStats"""
    assert sorted(pipeline.__all__) == expected.split()
    for name in pipeline.__all__:
        assert getattr(pipeline, name) is not None
        if name.endswith("Error"):
            assert getattr(pipeline, name) is getattr(errors, name), "one class, not a copy"
