"""Lease freshness and silence, measured on a clock the test drives (no waits).

The holder acts only while its last renewal was *sent* less than ``SAFE_FRACTION`` (0.75)
of the duration ago; an observer counts a holder dead only once its record was unchanged
for a whole duration of the observer's own clock, the duration the record states. Between
the two lies the margin that makes a takeover safe.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from gradientmail import BackendError, LeaseLostError, Mailbox
from gradientmail.patterns._lease_watch import LeaseWatcher
from gradientmail.patterns._leases import SAFE_FRACTION, Lease
from tests.support.clock import FakeClock
from tests.support.delegating import Delegating
from tests.support.interleave import Interleave

DURATION = 30.0


def test_the_holder_acts_without_a_request_inside_its_window_and_renews_past_it(
    box: Mailbox,
) -> None:
    clock = FakeClock()
    lease = Lease(box, "leases/h", "h", duration=DURATION, clock=clock)
    lease.acquire()
    written = lease.renewals  # the acquiring write counts
    clock.advance(SAFE_FRACTION * DURATION - 0.01)
    lease.ensure_fresh()
    assert lease.renewals == written, "renewed although its last write was still fresh"
    clock.advance(0.02)
    lease.ensure_fresh()
    assert lease.renewals == written + 1, "acted past its window without renewing first"


class FailingWrites(Delegating):
    """Fails every conditional write, as a store that is down would."""

    def put_if_match(self, *args: Any, **kwargs: Any) -> Any:
        raise BackendError("the store is down (injected)")

    def put(self, *args: Any, **kwargs: Any) -> Any:
        raise BackendError("the store is down (injected)")


def test_a_stale_holder_that_cannot_renew_stops_acting(box: Mailbox) -> None:
    clock = FakeClock()
    lease = Lease(box, "leases/h", "h", duration=DURATION, clock=clock)
    lease.acquire()
    lease.mailbox = FailingWrites(box)  # type: ignore[assignment]
    with pytest.raises(BackendError):
        lease.renew()  # a failed renewal inside the window leaves the holder fresh
    lease.ensure_fresh()
    clock.advance(SAFE_FRACTION * DURATION)
    with pytest.raises(LeaseLostError, match="could not renew"):
        lease.ensure_fresh()


def test_freshness_counts_from_when_a_renewal_was_sent_not_answered(box: Mailbox) -> None:
    clock = FakeClock()

    class SlowAnswer(Delegating):
        """The renewal's answer arrives 20 s after it was sent."""

        def put_if_match(self, *args: Any, **kwargs: Any) -> Any:
            result = self.inner.put_if_match(*args, **kwargs)
            clock.advance(20.0)
            return result

        def put(self, *args: Any, **kwargs: Any) -> None:
            self.inner.put(*args, **kwargs)
            clock.advance(20.0)

    lease = Lease(box, "leases/h", "h", duration=DURATION, clock=clock)
    lease.acquire()
    lease.mailbox = SlowAnswer(box)  # type: ignore[assignment]
    lease.renew()  # sent at t, answered at t + 20: fresh until t + 22.5, not t + 42.5
    lease.mailbox = box
    clock.advance(SAFE_FRACTION * DURATION - 20.0 + 0.01)
    before = lease.renewals
    lease.ensure_fresh()
    assert lease.renewals == before + 1, "trusted a renewal past its window from sending"


def test_an_observer_counts_silence_by_the_duration_the_lease_states(box: Mailbox) -> None:
    """An observer configured with a shorter lease than the holder's waits the holder's."""
    holder = Lease(box, "leases/h", "h", duration=DURATION)
    holder.acquire()
    clock = FakeClock()
    watcher = LeaseWatcher(box, "leases/", duration=5.0, clock=clock)
    assert not watcher.observe("h").dead
    clock.advance(DURATION - 0.01)
    assert not watcher.observe("h").dead, "dead by the observer's 5 s, not the lease's 30 s"
    clock.advance(0.02)
    assert watcher.observe("h").dead


def test_a_renewal_restarts_the_observers_count(box: Mailbox) -> None:
    holder = Lease(box, "leases/h", "h", duration=DURATION)
    holder.acquire()
    clock = FakeClock()
    watcher = LeaseWatcher(box, "leases/", duration=DURATION, clock=clock)
    watcher.observe("h")
    clock.advance(20.0)
    holder.renew()
    assert not watcher.observe("h").dead  # the count starts again here, at +20
    clock.advance(DURATION - 0.01)
    assert not watcher.observe("h").dead, "counted from the first sighting, not the renewal"
    clock.advance(0.02)
    assert watcher.observe("h").dead


@pytest.mark.parametrize("step", [3600.0, -3600.0], ids=["forward", "back"])
def test_a_stepped_wall_clock_moves_neither_freshness_nor_silence(
    box: Mailbox, monkeypatch: pytest.MonkeyPatch, step: float
) -> None:
    """NTP steps the wall clock an hour on the holder's host and the observer's: the holder
    still trusts its renewal exactly as long, and the observer still waits the whole
    duration, since both count on their monotonic clocks (``renewed_at``, the wall time in
    the record, is for people reading ``status``)."""
    import time

    clock = FakeClock()
    holder = Lease(box, "leases/h", "h", duration=DURATION, clock=clock)
    holder.acquire()
    watcher = LeaseWatcher(box, "leases/", duration=DURATION, clock=clock)
    assert not watcher.observe("h").dead
    wall = time.time
    monkeypatch.setattr(time, "time", lambda: wall() + step)
    written = holder.renewals
    clock.advance(SAFE_FRACTION * DURATION - 0.01)
    holder.ensure_fresh()
    assert holder.renewals == written, "the wall clock's step made the holder renew early"
    assert not watcher.observe("h").dead
    clock.advance(DURATION - SAFE_FRACTION * DURATION + 0.02)  # past a duration since the sighting
    assert watcher.observe("h").dead  # not sooner, not later, whichever way the wall moved


class FailsSomeRenewals(Delegating):
    """Fails the conditional writes numbered in ``failing`` (1-based); ``seen`` is set once
    the second write after the last of them was sent (so the first one was answered)."""

    def __init__(self, inner: Mailbox, failing: set[int]) -> None:
        super().__init__(inner)
        self.failing = failing
        self.writes = 0
        self.errors_seen: list[BaseException | None] = []
        self.lease: Lease | None = None
        self.seen = threading.Event()

    def put_if_match(self, *args: Any, **kwargs: Any) -> Any:
        self.writes += 1
        if self.lease is not None:
            self.errors_seen.append(self.lease.renew_error)  # what the loop held before
        if self.writes in self.failing:
            raise BackendError("the store is down (injected)")
        if self.writes > max(self.failing) + 1:
            self.seen.set()
        return self.inner.put_if_match(*args, **kwargs)


def test_a_failed_background_renewal_is_retried_next_period_and_fences_nothing(
    box: Mailbox,
) -> None:
    """Through the renewal thread: two renewals fail, the loop keeps the error, renews at
    the next period and clears it; the holder never counted itself lost."""
    lease = Lease(box, "leases/h", "h", duration=DURATION, period=0.02)
    lease.acquire()
    failing = FailsSomeRenewals(box, failing={1, 2})
    failing.lease = lease
    lease.mailbox = failing  # type: ignore[assignment]
    lease.start()
    try:
        assert failing.seen.wait(10), "the renewal thread stopped after a failure"
        before_fourth = failing.errors_seen[3]
    finally:
        lease.end()
    first, second, third = failing.errors_seen[:3]
    assert first is None
    assert isinstance(second, BackendError), "the first failure was not kept"
    assert isinstance(third, BackendError)
    assert before_fourth is None, "a successful renewal left the old error"
    assert not lease.lost


def test_a_holder_answered_late_never_acts_once_an_observer_declared_it_lost(
    box: Mailbox,
) -> None:
    """An observer reads a renewal the moment it lands, and its answer reaches the holder
    20 s later. The observer counts silence from its read, so the holder counts its window
    from the send: once the observer declares it lost, the holder's next act is refused."""
    clock = FakeClock()
    holder = Lease(box, "leases/h", "h", duration=DURATION, clock=clock)
    holder.acquire()
    watcher = LeaseWatcher(box, "leases/", duration=DURATION, clock=clock)

    def landed_then_answered_late() -> None:
        assert not watcher.observe("h").dead  # the observer's count starts at the send
        clock.advance(20.0)

    late = Interleave(box, "put_if_match", "leases/h", landed_then_answered_late)
    holder.mailbox = late  # type: ignore[assignment]
    holder.renew()
    clock.advance(DURATION - 20.0)  # a whole lease since the observer saw the renewal
    observed = watcher.observe("h")
    assert observed.dead
    assert watcher.declare_if_dead(observed, "w")
    with pytest.raises(LeaseLostError, match="declared lost by 'w'"):
        holder.ensure_fresh()  # trusting the renewal from its answer would act here


@pytest.mark.parametrize("observer_lease", [5.0, 120.0], ids=["shorter", "longer"])
def test_an_observer_with_another_lease_setting_declares_a_silent_holder_lost_on_its_lease(
    box: Mailbox, observer_lease: float
) -> None:
    """A holder cut off from the store goes silent, watched by an observer started with
    another ``lease=`` (a learner restarted with a different setting). The observer declares
    it lost after one lease of the holder's own, whatever its setting: never while the
    holder may still act on its last renewal, and not later either."""
    clock = FakeClock()
    holder = Lease(box, "leases/h", "h", duration=DURATION, clock=clock)
    holder.acquire()
    watcher = LeaseWatcher(box, "leases/", duration=observer_lease, clock=clock)
    holder.mailbox = FailingWrites(box)  # type: ignore[assignment]
    start = clock()
    step = 0.5
    while not watcher.declare_if_dead(watcher.observe("h"), "w"):
        clock.advance(step)
        assert clock() - start <= DURATION, "a holder silent for its whole lease is not lost"
    assert clock() - start == DURATION, "declared lost before the holder's lease ran out"
    with pytest.raises(LeaseLostError, match="could not renew"):
        holder.ensure_fresh()  # it stopped acting at SAFE_FRACTION of its lease
    holder.mailbox = box  # the store answers again: the holder learns it was declared lost
    with pytest.raises(LeaseLostError, match="declared lost by 'w'"):
        holder.ensure_fresh()
