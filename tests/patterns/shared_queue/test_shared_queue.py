"""``shared_queue``: exactly once, balance, prefetch bound, error order, prompt exit.

Tests that race learners against each other run on every backend whose conditional create
is atomic under concurrency (``RACE_RIGS``: moto's is not, so S3 races run on SeaweedFS, as
in tests/test_races.py). Single-learner behaviour runs on every backend through ``box``.
"""

from __future__ import annotations

import multiprocessing as mp
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from gradientmail import (
    AtomicityViolationError,
    ConfigurationError,
    InvalidKeyError,
    Mailbox,
    NotSupportedError,
    TransientBackendError,
)
from gradientmail._errors import WorkerError
from gradientmail.patterns._claims import read_claim
from gradientmail.patterns._workers import Bell, HandoffBuffer
from gradientmail.patterns.shared_queue import UNITS_PREFIX, shared_queue
from gradientmail.patterns.shared_queue import _epoch as shared_queue_module
from tests.support import stress
from tests.support.handoff_probe import WatchedBuffer, install
from tests.support.rigs import Rig

#: Rigs whose put_if_absent is atomic under concurrency: one per backend.
RACE_RIGS = ["rig_memory", "rig_file", "rig_s3_seaweed", "rig_gcs", "rig_azure"]
#: Rigs on which separate processes share keys.
PROCESS_RIGS = ["rig_file", "rig_s3_seaweed", "rig_gcs", "rig_azure"]


@pytest.fixture(params=RACE_RIGS)
def race_rig(request: pytest.FixtureRequest) -> Rig:
    return request.getfixturevalue(request.param)  # type: ignore[no-any-return]


@pytest.fixture
def race_box(race_rig: Rig) -> Mailbox:
    return race_rig.fresh()


def three_items(unit: str) -> Iterator[tuple[str, int]]:
    for k in range(3):
        yield (unit, k)


def claims_in(box: Mailbox) -> list[str]:
    return [key[len(UNITS_PREFIX) :] for key in box.list(UNITS_PREFIX)]


def queue_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("gradientmail-shared-queue")]


def wait_until(predicate: Callable[[], bool], timeout: float = 10) -> bool:
    """Poll ``predicate`` until it holds or ``timeout`` passes (a bounded condition)."""
    deadline = time.monotonic() + timeout
    pause = threading.Event()  # never set: wait() is the polling period
    while not predicate():
        if time.monotonic() > deadline:
            return False
        pause.wait(0.005)
    return True


def loader_ended(learner: str) -> bool:
    """Whether ``learner``'s loader thread has ended.

    The loader queues its failure (or the end marker) as the very last thing it does, so
    once its thread is gone whatever it had to say is in the buffer, behind its items.
    """
    name = f"gradientmail-shared-queue-{learner}"
    return not [t for t in threading.enumerate() if t.name == name]


class DelegatingMailbox:
    """Forwards to a real mailbox; subclasses intercept what they need."""

    def __init__(self, inner: Mailbox) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


# -- exactly once ---------------------------------------------------------------------------


def _learn(box: Mailbox, learner: str, units: dict[str, str], out: dict[str, Any]) -> None:
    with shared_queue(units, mailbox=box, learner_id=learner, load=three_items) as items:
        out[learner] = (list(items), items.stats.snapshot())


def _assert_exactly_once(box: Mailbox, units: dict[str, str], got: dict[str, list[Any]]) -> None:
    delivered = Counter(item for items in got.values() for item in items)
    duplicates = [item for item, n in delivered.items() if n > 1]
    assert duplicates == [], f"items delivered twice: {duplicates[:5]}"
    assert set(delivered) == {(u, k) for u in units for k in range(3)}, "every item delivered"
    loaded_by = {unit: learner for learner, items in got.items() for unit, _ in items}
    assert sorted(claims_in(box)) == sorted(units)
    for unit in list(units)[:: max(1, len(units) // 50)]:  # claims name the loading learner
        record = read_claim(box, UNITS_PREFIX + unit)
        assert record is not None
        assert record.owner == loaded_by[unit]


def _size_params() -> list[Any]:
    """2000 units on memory and file; on the emulators 300, and a larger run marked slow.

    The larger emulator run has 2000 units with ``GM_STRESS=full`` and 500 in CI: the claim
    walk at 2000 units is the same code on every backend, and runs at full size on memory
    and file in every CI run; what the emulators add is their own races, which 500 units
    by 8 threads still contest.
    """
    params = []
    for rig_name in RACE_RIGS:
        local = rig_name in ("rig_memory", "rig_file")
        large = 2000 if local else stress.size(ci=500, full=2000)
        params.append(
            pytest.param(
                rig_name,
                large,
                id=f"{rig_name[4:]}-{large}",
                marks=() if local else pytest.mark.slow,
            )
        )
        if not local:
            params.append(pytest.param(rig_name, 300, id=f"{rig_name[4:]}-300"))
    return params


@pytest.mark.parametrize(("rig_name", "size"), _size_params())
def test_8_learner_threads_load_every_unit_exactly_once(
    request: pytest.FixtureRequest, rig_name: str, size: int
) -> None:
    race_box = request.getfixturevalue(rig_name).fresh()
    units = {f"u{i:05d}": f"u{i:05d}" for i in range(size)}
    results: dict[str, Any] = {}
    threads = [
        threading.Thread(target=_learn, args=(race_box, f"learner-{n}", units, results))
        for n in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=600)
    assert len(results) == 8, "every learner finished"
    _assert_exactly_once(race_box, units, {k: v[0] for k, v in results.items()})
    stats = [v[1] for v in results.values()]
    assert sum(s.units_claimed for s in stats) == size
    assert sum(s.units_finished for s in stats) == size
    assert sum(s.items_delivered for s in stats) == 3 * size
    # Claiming stays cheap: learners spread out instead of racing for the same next unit,
    # and the view is refreshed by a few listings, not one per claim.
    # (A few losses per learner whatever the size; racing for the same unit would lose ~7x.)
    assert sum(s.conflicts_lost for s in stats) <= 8 * 16, [s.conflicts_lost for s in stats]
    assert sum(s.cost.listings for s in stats) <= 8 * 25, [s.cost.listings for s in stats]


def _process_learner(box: Mailbox, learner: str, size: int, barrier: Any, results: Any) -> None:
    units = {f"u{i:05d}": f"u{i:05d}" for i in range(size)}
    try:
        barrier.wait()
        with shared_queue(units, mailbox=box, learner_id=learner, load=three_items) as items:
            results.put((learner, list(items), None))
    except BaseException as exc:  # noqa: BLE001 - report every failure to the test
        results.put((learner, [], repr(exc)))


@pytest.mark.parametrize(
    "rig_name",
    [pytest.param(r, marks=() if r == "rig_file" else pytest.mark.slow) for r in PROCESS_RIGS],
)
def test_4_learner_processes_load_every_unit_exactly_once(
    request: pytest.FixtureRequest, rig_name: str
) -> None:
    rig: Rig = request.getfixturevalue(rig_name)
    # 2000 units on file://; fewer on the emulators, whose requests cost milliseconds each,
    # to keep CI's slow run short (the 8-thread test covers 2000 units there).
    size = 2000 if rig.name == "file" else 600
    box = rig.fresh()
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(4)
    results = ctx.Queue()
    procs = [
        ctx.Process(target=_process_learner, args=(box, f"proc-{n}", size, barrier, results))
        for n in range(4)
    ]
    for proc in procs:
        proc.start()
    got: dict[str, list[Any]] = {}
    errors = {}
    for _ in procs:
        learner, items, error = results.get(timeout=600)
        got[learner] = [tuple(item) for item in items]
        if error:
            errors[learner] = error
    for proc in procs:
        proc.join(timeout=60)
    assert errors == {}
    units = {f"u{i:05d}": f"u{i:05d}" for i in range(size)}
    _assert_exactly_once(box, units, got)


# -- balance (simulated time) ---------------------------------------------------------------


class SimClock:
    """Discrete simulated time for threads: time advances only when every participant sleeps.

    Participants call :meth:`sleep`; when all of them are asleep (or have left), the clock
    jumps to the earliest wake-up time and wakes exactly those due then.
    """

    def __init__(self, participants: int) -> None:
        self.now = 0.0
        self._cv = threading.Condition()
        self._running = participants
        self._sleepers: dict[str, float] = {}
        self._left: set[str] = set()

    def _advance(self) -> None:
        if self._running == 0 and self._sleepers:
            self.now = min(self._sleepers.values())
            for name, wake in list(self._sleepers.items()):
                if wake == self.now:
                    del self._sleepers[name]
                    self._running += 1
            self._cv.notify_all()

    def sleep(self, name: str, duration: float) -> None:
        with self._cv:
            self._sleepers[name] = self.now + duration
            self._running -= 1
            self._advance()
            assert self._cv.wait_for(lambda: name not in self._sleepers, timeout=60)

    def leave(self, name: str) -> None:
        """``name`` takes no further part: time no longer waits for it (idempotent)."""
        with self._cv:
            if name in self._left:
                return
            self._left.add(name)
            self._running -= 1
            self._advance()


class IdleAfterClaims(DelegatingMailbox):
    """Tells the clock a learner is idle once it lists the idle markers.

    A learner lists ``idle/`` only when no unit is free, it holds none, and it waits for
    the others to finish: from then on it loads nothing in this test.
    """

    def __init__(self, inner: Mailbox, on_idle: Callable[[], None]) -> None:
        super().__init__(inner)
        self.on_idle = on_idle
        self.idle = False

    def list(self, prefix: str = "") -> Iterator[str]:
        if prefix == "idle/" and not self.idle:
            self.idle = True
            self.on_idle()
        return self.inner.list(prefix)


def test_balance_fast_learner_takes_most_units_and_all_finish_together(race_box: Mailbox) -> None:
    costs = {"A": 1, "B": 2, "C": 2, "D": 4}
    units = {f"u{i:02d}": i for i in range(24)}
    clock = SimClock(len(costs))
    spans: dict[str, list[tuple[int, float, float]]] = {name: [] for name in costs}

    def learner(name: str) -> None:
        box = IdleAfterClaims(race_box, lambda: clock.leave(name))

        def load(unit: int) -> Iterator[int]:
            start = clock.now
            clock.sleep(name, costs[name])
            spans[name].append((unit, start, clock.now))
            yield unit

        try:
            with shared_queue(
                units, mailbox=box, learner_id=name, load=load, prefetch=1, lease=0.6
            ) as q:
                for _ in q:
                    pass
        finally:
            clock.leave(name)

    threads = [threading.Thread(target=learner, args=(name,)) for name in costs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    done = Counter(unit for name in costs for unit, _, _ in spans[name])
    assert sorted(done) == list(range(24))
    assert set(done.values()) == {1}
    counts = {name: len(spans[name]) for name in costs}
    makespan = max(end for name in costs for _, _, end in spans[name])
    # Best possible is t = 12 (A 11 or 10 units, B and C 5 or 6, D 3); a fixed split is 24.
    assert counts["A"] > max(counts["B"], counts["C"], counts["D"]), counts
    assert counts["D"] == min(counts.values()), counts
    assert makespan <= 12 + max(costs.values()), (makespan, counts)


# -- prefetch bound -------------------------------------------------------------------------


def test_loader_is_never_more_than_prefetch_items_ahead(box: Mailbox) -> None:
    prefetch, per_unit = 4, 10
    units = {f"u{i}": i for i in range(3)}
    total = len(units) * per_unit
    pulled = 0
    progress = threading.Condition()

    def load(unit: int) -> Iterator[int]:
        nonlocal pulled
        for k in range(per_unit):
            with progress:
                pulled += 1
                progress.notify_all()
            yield unit * per_unit + k

    q_stats = None
    with shared_queue(units, mailbox=box, learner_id="solo", load=load, prefetch=prefetch) as q:
        for consumed, _ in enumerate(q, 1):
            # Let the loader run as far as it is allowed, then check it went no further.
            allowed = min(consumed + prefetch, total)
            with progress:
                assert progress.wait_for(lambda a=allowed: pulled >= a, timeout=10)  # type: ignore[misc]
                assert pulled <= consumed + prefetch, (pulled, consumed)
        q_stats = q.stats
    assert pulled == total
    assert q_stats.items_delivered == total


class CountingClaims(DelegatingMailbox):
    """Counts claims, and sets ``too_many`` once they exceed ``limit``."""

    def __init__(self, inner: Mailbox) -> None:
        super().__init__(inner)
        self.claims = 0
        self.limit = 0
        self.too_many = threading.Event()

    def put_if_absent(self, key: str, data: bytes) -> bool:
        if key.startswith(UNITS_PREFIX):
            self.claims += 1
            if self.claims > self.limit:
                self.too_many.set()
        return bool(self.inner.put_if_absent(key, data))


def test_no_unit_is_claimed_while_the_buffer_is_full(
    box: Mailbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    buffers: list[HandoffBuffer[Any]] = []

    def observed_buffer(capacity: int, bell: Bell | None = None) -> HandoffBuffer[Any]:
        buffers.append(HandoffBuffer(capacity, bell))  # recorded, not altered
        return buffers[-1]

    monkeypatch.setattr(shared_queue_module, "HandoffBuffer", observed_buffer)
    prefetch = 2
    units = {f"u{i}": i for i in range(6)}
    counting = CountingClaims(box)
    counting.limit = prefetch
    loads = 0
    progress = threading.Condition()

    def load(unit: int) -> Iterator[int]:
        nonlocal loads
        with progress:
            loads += 1
            progress.notify_all()
        yield unit

    with shared_queue(
        units,
        mailbox=counting,  # type: ignore[arg-type]
        learner_id="solo",
        load=load,
        prefetch=prefetch,
    ) as q:
        (buffer,) = buffers
        for consumed in range(3):
            counting.limit = consumed + prefetch
            with progress:  # the buffer fills up: one item per unit
                assert progress.wait_for(lambda c=consumed: loads >= c + prefetch, timeout=10)
            # Wait until the loader blocks on the full buffer: it can claim nothing more
            # until we take an item, so the count is final (and one claim too many shows).
            # (It left its previous wait before loading the item counted above.)
            assert wait_until(lambda: buffer.waiting_for_room > 0)
            assert len(buffer) == prefetch
            assert not counting.too_many.is_set(), "claimed a unit while the buffer was full"
            assert counting.claims == loads == consumed + prefetch
            next(q)
        assert len(list(q)) == len(units) - 3
    assert counting.claims == len(units)


# -- errors ---------------------------------------------------------------------------------


class Boom(RuntimeError):
    pass


@pytest.mark.parametrize("k", [1, 4])
def test_load_error_arrives_after_the_items_before_it_chained(box: Mailbox, k: int) -> None:
    failed = threading.Event()

    def exploding_load(unit: str) -> Iterator[str]:
        for n in range(1, 10):
            if n == k:
                failed.set()
                raise Boom(f"item {n} of {unit}")
            yield f"{unit}-{n}"

    # prefetch=16 holds every item before the error, so the loader never waits for room:
    # it buffers them, queues the error behind them and ends before anything is taken.

    got: list[str] = []
    with (  # noqa: PT012 - the error arrives mid-loop
        pytest.raises(WorkerError) as caught,
        shared_queue(
            {"only": "only"}, mailbox=box, learner_id="l", load=exploding_load, prefetch=16
        ) as q,
    ):
        assert failed.wait(10)
        # Only once the loader has ended is the error certainly queued behind the items
        # (the event above is set before the error is even raised).
        assert wait_until(lambda: loader_ended("l")), "the loader never ended"
        got.extend(q)
    assert got == [f"only-{n}" for n in range(1, k)]
    error = caught.value
    assert isinstance(error.__cause__, Boom)
    assert f"item {k} of only" in str(error)
    assert "unit 'only'" in str(error)
    assert "exploding_load" in error.worker_traceback
    assert "Boom" in error.error_type


class FailingClaims(DelegatingMailbox):
    """Fails every claim from the ``n``-th on with a transient store error."""

    def __init__(self, inner: Mailbox, n: int) -> None:
        super().__init__(inner)
        self.n = n
        self.claims = 0
        self.failed = threading.Event()

    def put_if_absent(self, key: str, data: bytes) -> bool:
        if key.startswith(UNITS_PREFIX):
            self.claims += 1
            if self.claims >= self.n:
                self.failed.set()
                raise TransientBackendError("injected: the store is down", key=key)
        return bool(self.inner.put_if_absent(key, data))


def test_mailbox_error_arrives_after_the_items_before_it_chained(box: Mailbox) -> None:
    failing = FailingClaims(box, n=2)
    units = {"first": 3, "second": 3}

    def load(n: int) -> Iterator[int]:
        yield from range(n)

    got: list[int] = []
    with (  # noqa: PT012 - the error arrives mid-loop
        pytest.raises(WorkerError) as caught,
        # An outage outlasting the lease (here 1 s) gives up, past the loader's patience.
        shared_queue(
            units,
            mailbox=failing,  # type: ignore[arg-type]
            learner_id="l",
            load=load,
            prefetch=8,
            lease=1.0,
        ) as q,
    ):
        assert failing.failed.wait(10)
        # The claim failed before the error is queued: wait until the loader has ended,
        # its last act, so the error is in the buffer behind the first unit's items.
        assert wait_until(lambda: loader_ended("l")), "the loader never ended"
        got.extend(q)
    assert got == [0, 1, 2]
    assert isinstance(caught.value.__cause__, TransientBackendError)
    assert "injected" in str(caught.value)
    assert failing.claims - failing.n >= 2, "the loader gave up without trying again"


class NonAtomic(DelegatingMailbox):
    """Reports every create as won, but another learner's claim is what is stored."""

    def put_if_absent(self, key: str, data: bytes) -> bool:
        self.inner.put(key, data.replace(b'"token":"', b'"token":"x'))
        return True


def test_a_claim_read_back_with_another_owner_raises_instead_of_loading(box: Mailbox) -> None:
    loaded: list[str] = []

    def load(unit: str) -> list[str]:
        loaded.append(unit)
        return [unit]

    with (
        pytest.raises(WorkerError) as caught,
        shared_queue(
            {"u": "u"},
            mailbox=NonAtomic(box),  # type: ignore[arg-type]
            learner_id="l",
            load=load,
        ) as q,
    ):
        list(q)
    assert loaded == []
    assert isinstance(caught.value.__cause__, AtomicityViolationError)
    assert "conformance" in str(caught.value.__cause__)


# -- exit -----------------------------------------------------------------------------------


def test_break_with_a_slow_loader_returns_within_one_step_and_stops_claiming(
    box: Mailbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    exit_began = threading.Event()

    class ClosingBuffer(HandoffBuffer[Any]):
        """The queue's buffer; tells the test when the exit closes it (its first act)."""

        def close(self) -> None:
            super().close()
            exit_began.set()

    monkeypatch.setattr(shared_queue_module, "HandoffBuffer", ClosingBuffer)
    units = {f"u{i}": 200 for i in range(5)}  # a unit takes 200 loader steps
    steps = 0
    in_step = threading.Event()
    closed: list[bool] = []

    def slow_load(n: int) -> Iterator[int]:
        nonlocal steps
        try:
            for k in range(n):
                steps += 1
                if k == 1:
                    # Slow I/O that ends only once the exit has begun (bounded, to fail
                    # rather than hang). Every later step is instant: an exit that waited
                    # for more than this step would see the unit's other 198 steps run.
                    in_step.set()
                    exit_began.wait(60)
                yield k
        finally:
            closed.append(True)

    with shared_queue(units, mailbox=box, learner_id="l", load=slow_load, prefetch=4) as q:
        for _ in q:
            break
        assert in_step.wait(60), "the loader never began its second step"
        steps_at_break = steps  # the loader is inside step 1 of u0's 200
    assert exit_began.is_set()
    assert steps == steps_at_break == 2, "a loader step started after the exit began"
    assert queue_threads() == [], "no loader thread is left"
    assert closed == [True], "the unit's iterator was closed"
    assert claims_in(box) == ["u0"], "no new claim after the exit"


def test_an_exception_in_the_body_stops_prefetching(box: Mailbox) -> None:
    units = {f"u{i}": i for i in range(50)}
    loaded: list[int] = []

    def load(unit: int) -> Iterator[int]:
        loaded.append(unit)
        yield unit

    with (  # noqa: PT012 - the exception is raised inside the block
        pytest.raises(Boom),
        shared_queue(units, mailbox=box, learner_id="l", load=load, prefetch=2) as q,
    ):
        next(q)
        raise Boom("training failed")
    claimed = claims_in(box)
    assert queue_threads() == []
    assert len(claimed) <= 1 + 2 + 1, claimed  # taken + prefetched + the one being loaded
    assert len(claims_in(box)) == len(claimed), "no claim after the exit"


# -- order ----------------------------------------------------------------------------------


def test_a_single_learner_follows_the_mapping_order(box: Mailbox) -> None:
    units = {name: name for name in ["c", "a", "d", "b"]}
    with shared_queue(units, mailbox=box, learner_id="l", load=lambda u: [u]) as q:
        assert list(q) == ["c", "a", "d", "b"]


def test_order_is_a_preference_and_omitted_identifiers_follow_in_mapping_order(
    box: Mailbox,
) -> None:
    units = {name: name for name in ["a", "b", "c", "d"]}
    with shared_queue(
        units, mailbox=box, learner_id="l", load=lambda u: [u], order=["d", "b"]
    ) as q:
        assert list(q) == ["d", "b", "a", "c"]


def test_an_order_given_as_a_generator_is_followed(box: Mailbox) -> None:
    """A one-shot iterable is read once: the check of the order does not use it up."""
    units = {name: name for name in ["a", "b", "c", "d"]}
    order = (name for name in ["d", "b"])
    with shared_queue(units, mailbox=box, learner_id="l", load=lambda u: [u], order=order) as q:
        assert list(q) == ["d", "b", "a", "c"]


def test_each_learner_claims_its_preferred_lane_first(race_box: Mailbox) -> None:
    lanes = 4
    units = {f"lane{lane}-{i:02d}": (lane, i) for lane in range(lanes) for i in range(6)}
    everyone_claimed = threading.Barrier(lanes, timeout=30)
    claimed: dict[int, list[str]] = {lane: [] for lane in range(lanes)}

    def learner(lane: int) -> None:
        order = [u for u in units if u.startswith(f"lane{lane}-")]

        def load(unit: tuple[int, int]) -> Iterator[tuple[int, int]]:
            claimed[lane].append(f"lane{unit[0]}-{unit[1]:02d}")
            if len(claimed[lane]) == 1:
                everyone_claimed.wait()  # nobody moves on before all made a first claim
            yield unit

        with shared_queue(
            units, mailbox=race_box, learner_id=f"l{lane}", load=load, order=order, prefetch=1
        ) as q:
            list(q)

    threads = [threading.Thread(target=learner, args=(lane,)) for lane in range(lanes)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    for lane in range(lanes):
        assert claimed[lane][0].startswith(f"lane{lane}-"), claimed
    assert sorted(u for c in claimed.values() for u in c) == sorted(units)


# -- validation and telemetry ---------------------------------------------------------------


@pytest.mark.parametrize("bad", ["a/b", "", "..", "tab\there"])
def test_invalid_identifiers_are_refused_before_any_claim(box: Mailbox, bad: str) -> None:
    units = {"fine": 1, bad: 2}
    with (
        pytest.raises(InvalidKeyError, match="unit identifier") as caught,
        shared_queue(units, mailbox=box, learner_id="l", load=lambda u: [u]),
    ):
        pass  # pragma: no cover - never entered
    assert repr(bad) in str(caught.value)
    assert list(box.list()) == []


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"prefetch": 0}, "prefetch"),
        ({"order": ["nope"]}, "nope"),
        ({"order": ["a", "a"]}, "more than once"),
        ({"order": "ab"}, "string"),
    ],
)
def test_bad_options_raise_configuration_error(
    box: Mailbox, options: dict[str, Any], message: str
) -> None:
    with (
        pytest.raises(ConfigurationError, match=message),
        shared_queue({"a": 1, "b": 2}, mailbox=box, learner_id="l", load=lambda u: [u], **options),
    ):
        pass  # pragma: no cover - never entered


class DeclaresNothing(DelegatingMailbox):
    def supports(self, capability: object) -> bool:
        return False


def test_a_mailbox_without_atomic_create_is_refused(box: Mailbox) -> None:
    with (
        pytest.raises(NotSupportedError, match="ATOMIC_CREATE"),
        shared_queue({"a": 1}, mailbox=DeclaresNothing(box), learner_id="l", load=lambda u: [u]),  # type: ignore[arg-type]
    ):
        pass  # pragma: no cover - never entered
    assert list(box.list()) == []


def test_bad_learner_id_is_refused(box: Mailbox) -> None:
    with (
        pytest.raises(InvalidKeyError, match="learner id"),
        shared_queue({"a": 1}, mailbox=box, learner_id="x/y", load=lambda u: [u]),
    ):
        pass  # pragma: no cover - never entered


def test_telemetry_counts_claims_items_and_waits(
    box: Mailbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    buffers: list[WatchedBuffer] = []
    install(monkeypatch, buffers)
    units = {f"u{i}": f"u{i}" for i in range(5)}
    step = 0.02  # each item takes the loader this long: slow I/O, simulated
    #: the loader's time making each item, all of it inside one wait of the consumer's
    inside: list[float] = []

    def slow_items(unit: str) -> Iterator[tuple[str, int]]:
        (buffer,) = buffers
        for item in three_items(unit):
            # Make the item only once the consumer is blocked on the empty buffer: it stays
            # blocked until this item is put, so this whole stretch is part of its wait.
            began = buffer.consumer_blocked()
            time.sleep(step)  # the workload, not synchronisation
            inside.append(time.perf_counter() - began)
            yield item

    in_next = 0.0  # the consumer's time inside next(), measured around each call
    with shared_queue(units, mailbox=box, learner_id="l", load=slow_items) as q:
        taken = 0
        while True:
            began = time.perf_counter()
            try:
                next(q)
            except StopIteration:
                break
            finally:
                in_next += time.perf_counter() - began
            taken += 1
        assert taken == 15
        stats = q.stats.snapshot()
    assert stats.units_claimed == 5
    assert stats.units_finished == 5
    assert stats.items_delivered == 15
    assert stats.conflicts_lost == 0
    assert stats.claim_latency.count == 5
    assert stats.claim_latency.max > 0
    # The consumer waited for every item (15 stretches of loading, each inside one of its
    # waits, one wait per item): wait_s holds all of them, and it is the part of next()
    # spent blocked, no more than the time next() ran.
    (buffer,) = buffers
    assert len(inside) == 15
    assert buffer.waits >= 15
    assert 0.0 < sum(inside) <= stats.wait_s <= in_next, (sum(inside), stats.wait_s, in_next)
    assert stats.cost.listings >= 1
    assert stats.as_dict()["claim_latency"]["count"] == 5
    assert stats.as_dict()["cost"]["listings"] == stats.cost.listings
    # A snapshot is a copy: counting on does not change it.
    live = q.stats
    live.cost.listings += 1
    assert stats.cost.listings == live.cost.listings - 1
