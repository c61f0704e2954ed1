"""End-of-epoch suspects, on a clock the test drives: a learner of this epoch whose lease
went silent becomes a suspect, and a suspect that renews before ``settle`` is left alone
(not marked idle, not declared lost), on every backend.

A waiting learner watches the busy learners' leases (``IdleWatch.poll``). One silent for a
whole lease is a suspect: the waiter scans the claims, takes its units over, then
``settle`` marks it idle only if it is really gone. Marking a live learner idle would leave
it unwatched while it still works.
"""

from __future__ import annotations

from gradientmail import Mailbox
from gradientmail._record_codec import decode_record
from gradientmail.patterns._lease_watch import LeaseWatcher
from gradientmail.patterns._leases import Lease
from gradientmail.patterns._run_layout import LEASES_PREFIX, RunLayout
from gradientmail.patterns.shared_queue._idle_markers import IdleWatch
from gradientmail.patterns.shared_queue._unit_claims import UnitClaims
from tests.support.clock import FakeClock

DURATION = 30.0
LAYOUT = RunLayout(0)


def watch_of(box: Mailbox, clock: FakeClock) -> IdleWatch:
    """Learner ``w``, idle, watching the others."""
    Lease(box, LEASES_PREFIX + "w", "w", duration=DURATION, extra={"epoch": 0}).acquire()
    watcher = LeaseWatcher(box, LEASES_PREFIX, duration=DURATION, clock=clock)
    idle = IdleWatch(UnitClaims(box, LAYOUT, "w", 1), watcher, period=DURATION / 3)
    idle.mark()
    return idle


def busy_learner(box: Mailbox) -> Lease:
    lease = Lease(box, LEASES_PREFIX + "h", "h", duration=DURATION, extra={"epoch": 0})
    lease.acquire()
    return lease


def marked(box: Mailbox) -> set[str]:
    return {key.removeprefix(LAYOUT.idle) for key in box.list(LAYOUT.idle)}


def test_a_learner_of_this_epoch_whose_lease_went_silent_is_a_suspect(box: Mailbox) -> None:
    clock = FakeClock()
    idle = watch_of(box, clock)
    busy_learner(box)  # then silent: no renewal follows
    first = idle.poll()
    assert (first.nobody_busy, first.suspects) == (False, [])
    clock.advance(DURATION - 0.01)
    assert idle.poll().suspects == [], "a suspect before its lease ran out"
    clock.advance(DURATION / 3)  # a watched lease is read at most once a renewal period
    poll = idle.poll()
    assert poll.suspects == ["h"]
    assert not poll.nobody_busy, "a suspect may hold units: the epoch is not over"
    idle.settle(poll.suspects)
    assert marked(box) == {"w", "h"}
    assert (decode_record(box.get(LEASES_PREFIX + "h")) or {}).get("state") == "lost"


def test_a_suspect_that_renews_before_settle_is_left_alone(box: Mailbox) -> None:
    clock = FakeClock()
    idle = watch_of(box, clock)
    holder = busy_learner(box)
    idle.poll()
    clock.advance(DURATION + 1)
    poll = idle.poll()
    assert poll.suspects == ["h"]
    holder.renew()  # it was only slow: alive after all
    idle.settle(poll.suspects)
    assert marked(box) == {"w"}, "a live learner was marked idle"
    assert (decode_record(box.get(LEASES_PREFIX + "h")) or {}).get("state") == "running"
    holder.renew()  # still its own lease: no LeaseLostError
    assert idle.poll().suspects == [], "still suspected after it renewed"
