"""An owner that renews while an observer declares it lost stays the owner, on every
backend: built with an interleaving hook, not waited for.

The observer reads the lease (``observe``), then ``declare_lost`` reads it again and swaps
it to ``lost`` against the version it first saw. A renewal landing after either read must
win: the declaration returns ``False``, the lease still says ``running``, and the owner's
next renewal succeeds (it is not fenced). An owner that ends in between, or another
observer that declares first, leaves the owner gone: the declaration returns ``True``.
"""

from __future__ import annotations

import pytest

from gradientmail import Mailbox
from gradientmail._record_codec import decode_record
from gradientmail.patterns._lease_watch import LeaseWatcher
from gradientmail.patterns._leases import Lease
from tests.support.interleave import Interleave


@pytest.mark.parametrize(
    "nth", [1, 2], ids=["renewed-after-observe", "renewed-inside-declare-lost"]
)
def test_an_owner_renewing_while_declared_lost_stays_the_owner(box: Mailbox, nth: int) -> None:
    owner = Lease(box, "leases/h", "h", duration=30)
    owner.acquire()
    watched = Interleave(box, "get_versioned", "leases/h", owner.renew, nth=nth)
    watcher = LeaseWatcher(watched, "leases/", duration=30)  # type: ignore[arg-type]
    watcher.observe("h")
    assert not watcher.declare_lost("h", by="w"), "declared lost although it renewed"
    assert watched.ran.is_set(), "the renewal was not interleaved"
    assert (decode_record(box.get("leases/h")) or {}).get("state") == "running"
    owner.renew()  # still the owner: no LeaseLostError
    owner.end()


def test_an_owner_that_stays_silent_is_declared_lost_exactly_once(box: Mailbox) -> None:
    owner = Lease(box, "leases/h", "h", duration=30)
    owner.acquire()
    first = LeaseWatcher(box, "leases/", duration=30)
    second = LeaseWatcher(box, "leases/", duration=30)
    first.observe("h")
    second.observe("h")
    # The second declares between the first's read and its swap: one declaration wins.
    racing = Interleave(box, "get_versioned", "leases/h", lambda: second.declare_lost("h", "b"))
    first.mailbox = racing  # type: ignore[assignment]
    assert first.declare_lost("h", by="a")  # True: the lease already says lost (by b)
    record = decode_record(box.get("leases/h")) or {}
    assert record.get("state") == "lost"
    assert record.get("lost_by") == "b"


def test_an_owner_that_ends_while_declared_lost_is_gone_and_keeps_its_record(
    box: Mailbox,
) -> None:
    """The owner releases its lease between the observer's last read and its swap (it
    leaves early just as another finds it silent). The swap fails, yet the owner is gone:
    the declaration says so, so that its units are taken now rather than at a later poll,
    and the lease keeps the state the owner wrote."""
    owner = Lease(box, "leases/h", "h", duration=30)
    owner.acquire()
    watcher = LeaseWatcher(box, "leases/", duration=30)
    watcher.observe("h")
    ending = Interleave(box, "get_versioned", "leases/h", lambda: owner.end("released"))
    watcher.mailbox = ending  # type: ignore[assignment]
    assert watcher.declare_lost("h", by="w"), "an owner that ended reads as alive"
    assert ending.ran.is_set(), "the end was not interleaved"
    record = decode_record(box.get("leases/h")) or {}
    assert record.get("state") == "released"
    assert "lost_by" not in record
