"""A learner with nothing free to claim: how it waits, and how the epoch ends.

An idle marker tells the others "this learner holds nothing": once every leased learner is
marked, the leader lists ``done/`` to end the epoch. So a learner must not mark itself idle
while a unit it finished still waits for its completion record.

The end must reach every learner within about a second of the last completion, whatever
the lease: a waiting learner reads the epoch's ``complete`` record once a second between
its full polls (which back off to a renewal period, 20 s at the default lease), and the
learner that finishes last writes that record at once. A learner restarted after a cut
completion repairs it and ends at once too. Without compare-and-swap one scan decides.

Most tests below run :class:`Waiting` as the loader thread does, step after step, on a
simulated clock (:class:`Sim`): a pause schedules the next step instead of sleeping, and
leases renew on the same clock, so a wait of a minute takes no time and the order of
events is the same on every run.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import uuid
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest

from gradientmail import Capability, Mailbox
from gradientmail._counting import Counting, RequestTally
from gradientmail._record_codec import decode_record
from gradientmail.backends.memory import MemoryMailbox
from gradientmail.patterns._claims import parse_claim
from gradientmail.patterns._leases import Lease, LeaseWatcher
from gradientmail.patterns._run_layout import LEASES_PREFIX, RunLayout
from gradientmail.patterns._workers import Bell, HandoffBuffer
from gradientmail.patterns.shared_queue import _pacing, _waiting, shared_queue
from gradientmail.patterns.shared_queue._claim_pages import ClaimPages
from gradientmail.patterns.shared_queue._completion_gate import IMMEDIATELY
from gradientmail.patterns.shared_queue._holdings import Holdings
from gradientmail.patterns.shared_queue._idle_markers import IdleWatch
from gradientmail.patterns.shared_queue._loader import ClaimLoop
from gradientmail.patterns.shared_queue._pacing import Pacing
from gradientmail.patterns.shared_queue._policy import ClaimPolicy
from gradientmail.patterns.shared_queue._scope import Scope, Setup
from gradientmail.patterns.shared_queue._stats import SCANS, QueueCost, QueueStats
from gradientmail.patterns.shared_queue._takeover import Takeover
from gradientmail.patterns.shared_queue._unit_claims import Held, UnitClaims
from gradientmail.patterns.shared_queue._waiting import NOTICE_S, Next, Waiting
from tests.support.clock import FakeClock
from tests.support.delegating import Delegating


@pytest.fixture
def box(local_box: Mailbox) -> Mailbox:
    return local_box


class HoldsTheRecord(Delegating):
    """Holds every ``done/`` record until released; notes idle markers created meanwhile."""

    def __init__(self, inner: Mailbox) -> None:
        super().__init__(inner)
        self.release = threading.Event()
        self.recording = threading.Event()  # the record is being written, and held
        self.decided = threading.Event()  # the loader reached its idle decision
        self.idle_while_held: list[str] = []
        self.holdings: Holdings | None = None

    def put_if_absent(self, key: str, data: Any) -> bool:
        if key.startswith("done/"):
            self.recording.set()
            assert self.release.wait(60), "the test never released the record"
        elif key.startswith("idle/") and not self.release.is_set():
            self.idle_while_held.append(key)
            self.decided.set()
        return bool(self.inner.put_if_absent(key, data))


def test_no_idle_marker_while_a_finished_unit_awaits_its_record(
    box: Mailbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = HoldsTheRecord(box)
    original = Holdings.wait_at_most

    def wait_at_most(self: Holdings, limit: int) -> bool:
        if limit == 0 and not held.release.is_set():
            held.holdings = self
            held.decided.set()  # about to wait for its own units before marking idle
        return original(self, limit)

    monkeypatch.setattr(Holdings, "wait_at_most", wait_at_most)
    got: list[int] = []

    def learner() -> None:
        with shared_queue({"u0": 0}, mailbox=held, learner_id="a", load=lambda u: [u]) as q:  # type: ignore[arg-type]
            got.extend(q)

    thread = threading.Thread(target=learner)
    thread.start()
    try:
        assert held.decided.wait(60), "the loader never reached its idle decision"
        assert held.recording.wait(60), "the completion was never recorded"
        assert held.idle_while_held == [], "marked idle while its unit's record was pending"
        assert held.holdings is not None
        assert held.holdings.identifiers() == {"u0"}, "the unit left the holdings unrecorded"
    finally:
        held.release.set()
        thread.join(timeout=60)
    assert not thread.is_alive()
    assert got == [0]


# -- waiting on a simulated clock ------------------------------------------------------------

UNITS = ("u0", "u1")
LAYOUT = RunLayout(0)
#: The default lease: full polls back off to a renewal period, 20 s.
LEASE = 60.0
#: When the busy learner finishes: half a minute of waiting, mid-way between two full polls
#: of a waiter backing off from 0.1 s (they fall at about 25.5 s and 45.5 s).
FINISH_AT = 30.5


class Sim:
    """Simulated time for learners that wait, in the test's one thread: what is due first
    runs next, and the clock jumps to it. A learner's pause schedules its next step,
    leases renew every period, and the test schedules what the other learners do."""

    def __init__(self) -> None:
        self.clock = FakeClock()
        self._due: list[tuple[float, int, Callable[[], object]]] = []
        self._order = itertools.count()

    def after(self, seconds: float, action: Callable[[], object]) -> None:
        heapq.heappush(self._due, (self.clock() + seconds, next(self._order), action))

    def every(self, seconds: float, action: Callable[[], object]) -> None:
        def again() -> None:
            action()
            self.after(seconds, again)

        self.after(seconds, again)

    def run(self, until: Callable[[], bool], *, within: float) -> None:
        """Run what is due until ``until()`` holds; fail past ``within`` simulated seconds."""
        deadline = self.clock() + within
        while not until():
            at, _, action = heapq.heappop(self._due)  # never empty: renewals recur
            assert at <= deadline, f"still not done after {within} s (simulated)"
            self.clock.advance(at - self.clock())
            action()


@pytest.fixture
def sim(monkeypatch: pytest.MonkeyPatch) -> Sim:
    """The waiting's clock and its pacing's are the simulation's (each learner's lease
    watcher is given the same clock)."""
    simulation = Sim()
    clock = SimpleNamespace(monotonic=simulation.clock)
    monkeypatch.setattr(_waiting, "time", clock)
    monkeypatch.setattr(_pacing, "time", clock)
    return simulation


class Paced(threading.Event):
    """The queue's closing event as a loader's pause waits on it: the wait schedules the
    learner's next step at the simulated time it would end, and returns at once."""

    def __init__(self, sim: Sim, step: Callable[[], None]) -> None:
        super().__init__()
        self.sim = sim
        self.step = step

    def wait(self, timeout: float | None = None) -> bool:
        assert timeout is not None
        assert timeout > 0, "a pause that does not pass time"
        self.sim.after(timeout, self.step)
        return False


class Learner:
    """One learner's claims and waiting, driven as its loader thread drives them."""

    def __init__(self, sim: Sim, box: Any, name: str, *, holdings: Holdings | None = None) -> None:
        self.sim = sim
        self.lease = Lease(
            box,
            LEASES_PREFIX + name,
            name,
            duration=LEASE,
            extra={"epoch": 0, "epochs": [0]},
            clock=sim.clock,
        )
        self.lease.acquire()
        #: Set while the learner renews nothing (paused, or slow).
        self.silent = False
        sim.every(self.lease.period, self.renew)
        # Its requests go through the counting door, as an epoch's do (its cost is a view).
        self.tally = RequestTally()
        counted = Counting(box, self.tally)
        self.claims = UnitClaims(counted, LAYOUT, name, self.lease.incarnation)
        stats = QueueStats()
        pages = ClaimPages(counted, LAYOUT.units)
        policy = ClaimPolicy(list(UNITS), name, pages, shared_order=True)
        self.holdings = Holdings() if holdings is None else holdings
        closing = Paced(sim, self.step)
        self.scope = Scope(self.claims, self.lease, policy, self.holdings, stats, closing)
        # The epoch's parts, built as the epoch builds them, on the simulation's clock.
        watcher = LeaseWatcher(counted, LEASES_PREFIX, duration=LEASE, clock=sim.clock)
        idle = IdleWatch(self.claims, watcher, self.lease.period)
        pacing = Pacing(self.lease.period, closing)
        scanning = Counting(box, self.tally, label=SCANS)
        scans = UnitClaims(scanning, LAYOUT, name, self.lease.incarnation)
        takeover = Takeover(self.scope, scans, watcher, idle, pacing)
        self.waiting = Waiting(self.scope, idle, takeover, pacing, wait_for_others=True)
        # prefetch 1, no reporter, waiting for others, in the mapping's order, recorded at once
        setup = Setup(box, dict.fromkeys(UNITS), list, name, 1, None, True, True, IMMEDIATELY)
        buffer: HandoffBuffer[Any] = HandoffBuffer(1, Bell())
        loop = ClaimLoop(
            self.scope, setup, buffer, takeover=takeover, waiting=self.waiting, idle=idle
        )
        loop.start()  # the loader's start: its scan, the members, an earlier self's units
        #: What each step decided.
        self.steps: list[Held | Next] = []
        self.ended_at: float | None = None

    @property
    def cost(self) -> QueueCost:
        """What its claiming and waiting cost, as ``queue.stats.cost`` says it."""
        return QueueCost.of(self.tally.counts())

    def renew(self) -> None:
        """Its lease's renewal, due every period, unless it is silent."""
        if not self.silent:
            self.lease.renew()

    def claim_free(self) -> dict[str, Held]:
        """Claim every unit still free, as the loader does before it waits."""
        policy, taken = self.scope.policy, {}
        while (p := policy.next()) is not None:
            held = self.claims.claim(policy.identifiers[p])
            if held is None:
                policy.lost(p)
                continue
            policy.won(p)
            self.holdings.add(held)
            taken[held.identifier] = held
        return taken

    def complete(self, held: Held) -> None:
        """What the recorder does once the consumer took the unit's last item."""
        assert self.claims.complete(held)
        self.holdings.remove(held.identifier)

    def step(self) -> None:
        """Nothing is free: one step of the waiting, then a pause unless it is over."""
        assert self.scope.policy.next() is None, "a unit was free"
        found = self.waiting.step()
        self.steps.append(found)
        if found is Next.WAIT:
            self.waiting.pause()
        else:
            self.ended_at = self.sim.clock()


def ended_by(*learners: Learner) -> Callable[[], bool]:
    return lambda: all(learner.ended_at is not None for learner in learners)


def end_record(box: Mailbox) -> dict[str, Any]:
    return decode_record(box.get(LAYOUT.complete)) or {}


class Looks(Delegating):
    """Notes the simulated time of each look that can show the end: a read of the epoch's
    ``complete`` record, or a full poll's listing of the idle markers."""

    def __init__(self, inner: Mailbox, clock: FakeClock) -> None:
        super().__init__(inner)
        self.clock = clock
        self.at: list[float] = []
        self.polls: list[float] = []

    def get(self, key: str, *args: Any, **kwargs: Any) -> Any:
        if key == LAYOUT.complete:
            self.at.append(self.clock())
        return self.inner.get(key, *args, **kwargs)

    def list(self, prefix: str = "", **kwargs: Any) -> Any:
        if prefix == LAYOUT.idle:
            self.at.append(self.clock())
            self.polls.append(self.clock())
        return self.inner.list(prefix, **kwargs)


def test_a_waiting_learner_looks_for_the_end_each_second_and_ends_within_one(
    box: Mailbox, sim: Sim
) -> None:
    """While the other learner works for half a minute, the waiting one's full polls back
    off to a renewal period, yet between them it reads ``complete`` once a second: it never
    goes a second without a look that would show the end, and it ends within a second of
    the record, though that falls between two of its full polls."""
    busy = Learner(sim, box, "h")
    held = busy.claim_free()
    assert sorted(held) == sorted(UNITS)
    looks = Looks(box, sim.clock)
    waiter = Learner(sim, looks, "w")
    assert waiter.claim_free() == {}
    began = sim.clock()
    waiter.step()

    def busy_finishes() -> None:
        for unit in held.values():
            busy.complete(unit)
        busy.step()  # nothing free: it goes idle last, and records the end

    sim.after(FINISH_AT, busy_finishes)
    finished_at = began + FINISH_AT
    sim.run(ended_by(busy, waiter), within=2 * LEASE)
    assert end_record(box)["units"] == len(UNITS)
    assert waiter.steps[-1] is Next.END
    gaps = [later - earlier for earlier, later in itertools.pairwise(looks.polls)]
    for earlier, later in itertools.pairwise(gaps):  # its full polls back off
        assert later == pytest.approx(min(2 * earlier, LEASE / 3)), f"full polls {gaps}"
    assert waiter.cost.idle_polls == len(looks.polls)
    moments = [began, *(t for t in looks.at if t <= finished_at), finished_at]
    longest = max(later - earlier for earlier, later in itertools.pairwise(moments))
    assert longest <= NOTICE_S, f"{longest:.1f} s without a look that would show the end"
    assert waiter.ended_at is not None
    assert waiter.ended_at - finished_at <= NOTICE_S, "it noticed the end late"


@pytest.mark.parametrize("last", ["a", "b"], ids=["a-last", "b-last"])
def test_the_learner_that_finishes_last_ends_the_epoch_at_once_leader_or_not(
    box: Mailbox, sim: Sim, last: str
) -> None:
    """The learner that goes idle last finds nobody busy and lists ``done/`` at its first
    poll: it does not wait for the leader, whose next full poll may be a renewal period
    away. Each learner is the last once, so it is the epoch's leader once and not once."""
    first = "b" if last == "a" else "a"
    finisher = Learner(sim, box, last)
    held = finisher.claim_free()
    waiter = Learner(sim, box, first)
    waiter.step()

    def finishes() -> None:
        for unit in held.values():
            finisher.complete(unit)
        finisher.step()

    sim.after(FINISH_AT, finishes)
    sim.run(ended_by(finisher, waiter), within=2 * LEASE)
    assert finisher.steps == [Next.END], "the last learner waited for someone else to end"
    assert end_record(box)["by"] == last
    assert waiter.ended_at is not None
    assert waiter.ended_at - (finisher.ended_at or 0) <= NOTICE_S


class RecordedWhileWaited(threading.Condition):
    """The holdings' condition, in the simulation's one thread: where the loader waits
    for its own completions, the recorder thread records the pending ones."""

    def __init__(self) -> None:
        super().__init__()
        self.pending: list[Callable[[], object]] = []

    def wait(self, timeout: float | None = None) -> bool:
        assert self.pending, "the loader waits for a completion that nobody records"
        while self.pending:
            self.pending.pop(0)()
        return True


class SlowRecords(Holdings):
    """Holdings whose completions are recorded only while the loader waits for them."""

    def __init__(self) -> None:
        super().__init__()
        self.recorder = RecordedWhileWaited()
        self._changed = self.recorder


class MarkerTimes(Delegating):
    """Notes, for each idle marker created, which completion records existed then."""

    def __init__(self, inner: Mailbox) -> None:
        super().__init__(inner)
        self.marked: dict[str, set[str]] = {}

    def put_if_absent(self, key: str, data: Any) -> bool:
        if key.startswith(LAYOUT.idle):
            done = {k.removeprefix(LAYOUT.done) for k in self.inner.list(LAYOUT.done)}
            self.marked[key.removeprefix(LAYOUT.idle)] = done
        return bool(self.inner.put_if_absent(key, data))


def test_a_learner_whose_last_record_is_slow_goes_idle_after_it_and_still_ends_the_epoch(
    box: Mailbox, sim: Sim
) -> None:
    """The last learner runs out of units while its last unit's completion is still being
    recorded. It waits for that record before it marks itself idle, so it is still the one
    that finds every unit done and ends the epoch for the waiting learner within a second;
    marked idle before, it would hold a unit the others believe nobody holds."""
    markers = MarkerTimes(box)
    holdings = SlowRecords()
    last = Learner(sim, markers, "h", holdings=holdings)
    held = last.claim_free()
    last.complete(held["u1"])
    waiter = Learner(sim, markers, "w")
    waiter.step()

    def runs_dry() -> None:  # the consumer took u0's last item; its record is on its way
        holdings.recorder.pending.append(lambda: last.complete(held["u0"]))
        last.step()

    sim.after(FINISH_AT, runs_dry)
    sim.run(ended_by(last, waiter), within=2 * LEASE)
    assert markers.marked["h"] == set(UNITS), "marked idle while its unit was unrecorded"
    assert last.steps == [Next.END]
    assert end_record(box)["by"] == "h"
    assert waiter.ended_at is not None
    assert waiter.ended_at - (last.ended_at or 0) <= NOTICE_S


class RenewsDuringTheScan(Delegating):
    """Runs ``renew`` once, when the learner next lists ``done/`` (a scan of the claims)."""

    def __init__(self, inner: Mailbox) -> None:
        super().__init__(inner)
        self.renew: Callable[[], object] | None = None

    def list(self, prefix: str = "", **kwargs: Any) -> Any:
        renew = self.renew
        if prefix == LAYOUT.done and renew is not None:
            self.renew = None
            renew()
        return self.inner.list(prefix, **kwargs)


def test_a_busy_learner_that_renews_once_suspected_stays_watched_and_is_not_scanned_for(
    box: Mailbox, sim: Sim
) -> None:
    """The busy learner renews nothing for over a lease (paused), so the waiting learner
    suspects it and scans the claims; it renews during that scan. It is alive: its units
    stay its own, it is not marked idle, and the waiter goes back to watching its lease,
    with no scan more, until it finishes and the epoch ends."""
    busy = Learner(sim, box, "h")
    held = busy.claim_free()
    hook = RenewsDuringTheScan(box)
    waiter = Learner(sim, hook, "w")
    waiter.step()
    busy.silent = True

    def wakes() -> None:
        busy.silent = False
        busy.lease.renew()

    def suspected() -> bool:
        return waiter.cost.wait_scans > 0

    sim.after(LEASE / 2, lambda: setattr(hook, "renew", wakes))  # armed while it is silent
    sim.run(suspected, within=2 * LEASE)
    assert hook.renew is None, "it renewed during the scan"
    # That step is over: the scan, its takeovers and ``settle``.
    assert "h" not in {k.removeprefix(LAYOUT.idle) for k in box.list(LAYOUT.idle)}
    claims = [parse_claim(box.get(LAYOUT.units + unit)) for unit in UNITS]
    assert {c.owner for c in claims if c is not None} == {"h"}, "a live learner's unit was taken"
    busy.lease.renew()  # still its own lease: not declared lost

    def finishes() -> None:
        for unit in held.values():
            busy.complete(unit)
        busy.step()

    sim.after(2 * LEASE, finishes)
    sim.run(ended_by(busy, waiter), within=4 * LEASE)
    assert waiter.cost.wait_scans == 1, "it scanned the claims for a live learner"
    assert end_record(box)["by"] in {"h", "w"}


class DiesBeforeTheRecord(Delegating):
    """A learner's store that it dies in: after the claim's swap to done, before
    ``done/{id}``."""

    def put_if_absent(self, key: str, data: Any) -> bool:
        if key.startswith(LAYOUT.done):
            raise RuntimeError("killed between the claim's swap to done and the record")
        return bool(self.inner.put_if_absent(key, data))


def test_a_restart_that_repairs_a_cut_completion_ends_at_its_next_poll(
    box: Mailbox, sim: Sim
) -> None:
    """The earlier incarnation of ``a`` died between the two writes of u0's completion.
    Restarted, ``a`` trains u1, goes idle, and its listing of ``done/`` lacks u0: it
    repairs the record, and the repair is a change, so it lists ``done/`` again at its next
    poll and ends, instead of trusting the failed listing for a renewal period."""
    earlier = Lease(box, LEASES_PREFIX + "a", "a", duration=LEASE, extra={"epoch": 0})
    earlier.acquire()
    claims = UnitClaims(box, LAYOUT, "a", earlier.incarnation)
    cut = claims.claim("u0")
    assert cut is not None
    with pytest.raises(RuntimeError, match="killed"):
        UnitClaims(DiesBeforeTheRecord(box), LAYOUT, "a", earlier.incarnation).complete(cut)
    earlier.end("failed")  # what its exit wrote
    assert list(box.list(LAYOUT.done)) == []
    restarted = Learner(sim, box, "a")
    assert restarted.lease.incarnation == earlier.incarnation + 1
    held = restarted.claim_free()
    assert sorted(held) == ["u1"], "the cut unit is not free: its claim reads done"
    restarted.complete(held["u1"])
    began = sim.clock()
    restarted.step()
    sim.run(ended_by(restarted), within=2 * LEASE)
    assert restarted.steps[-1] is Next.END
    assert (decode_record(box.get(LAYOUT.done + "u0")) or {}).get("repaired") is True
    assert end_record(box)["by"] == "a"
    assert (restarted.ended_at or 0) - began <= NOTICE_S, "it waited long after the repair"


class NoCompareAndSwap(MemoryMailbox):
    """``memory://`` that declares atomic create only."""

    capabilities: ClassVar[frozenset[Capability]] = frozenset({Capability.ATOMIC_CREATE})


def test_without_compare_and_swap_a_learner_finding_only_live_claims_ends_at_its_first_step(
    sim: Sim,
) -> None:
    """Claims are permanent there: no takeover can free a unit another learner holds, so
    a learner that finds none free ends at once, reads no claim and marks nothing idle."""
    box = NoCompareAndSwap(f"no-cas-{uuid.uuid4().hex[:8]}")
    holder = Learner(sim, box, "h")
    assert sorted(holder.claim_free()) == sorted(UNITS)
    waiter = Learner(sim, box, "w")
    assert waiter.claim_free() == {}
    waiter.step()
    assert waiter.steps == [Next.END], "it waited for units that no takeover can free"
    assert list(box.list(LAYOUT.idle)) == []
