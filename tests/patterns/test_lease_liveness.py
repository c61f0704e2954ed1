"""Leases: a live holder renews on its own and is never declared dead; a silent one is.

Every pattern whose workers can die rests on :mod:`gradientmail.patterns._leases`: a holder's
background thread rewrites its record, an observer declares it dead only after seeing the
record unchanged for the lease duration, and a holder declared dead stops acting. Here a
holder is idle (it never calls ``ensure_fresh``), so only its background renewals keep it
alive, through a store outage too; and a pipeline producer declared lost must refuse its
next items. Each test runs on every backend.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from gradientmail import BackendError, Capability, LeaseLostError, Mailbox
from gradientmail._record_codec import decode_record
from gradientmail.patterns._leases import Lease, LeaseWatcher
from gradientmail.patterns.pipeline import Pipeline, PipelineAbortedError
from gradientmail.patterns.pipeline._records import PRODUCER_LEASES
from tests.support.outage import Outage
from tests.support.pipeline_workers import FAST, payload

pytestmark = pytest.mark.timeout(60)

#: Bound on waits for something a background thread does within a fraction of a second.
BOUND = 10.0


def _until(condition: Callable[[], bool], what: str, bound: float = BOUND) -> None:
    """Poll ``condition`` (bounded): it is made true by another thread or by time passing."""
    deadline = time.monotonic() + bound
    pause = threading.Event()  # never set: wait() is the polling period
    while not condition():
        assert time.monotonic() < deadline, f"not within {bound}s: {what}"
        pause.wait(0.01)


@pytest.fixture
def cas_box(box: Mailbox) -> Mailbox:
    if not box.supports(Capability.COMPARE_AND_SWAP):
        pytest.skip("leases are fenced with compare-and-swap")
    return box


def test_a_started_lease_renews_in_the_background(cas_box: Mailbox) -> None:
    lease = Lease(cas_box, "leases/h", "h", duration=3.0, period=0.05)
    lease.acquire()
    lease.start()
    try:
        # Due within 0.15 s; the bound leaves room for a busy machine.
        _until(lambda: lease.renewals >= 4, "three background renewals", bound=5.0)
        record = decode_record(cas_box.get("leases/h"))
        assert record is not None
        assert record["seq"] >= 3, "each renewal rewrote the record"
        assert record["state"] == "running"
    finally:
        lease.end()
    ended = decode_record(cas_box.get("leases/h"))
    assert ended is not None
    assert ended["state"] == "finished"


def test_a_watcher_never_declares_a_renewing_holder_dead(cas_box: Mailbox) -> None:
    lease = Lease(cas_box, "leases/h", "h", duration=1.0, period=0.05)
    lease.acquire()
    lease.start()
    watcher = LeaseWatcher(cas_box, "leases/", duration=1.0)
    try:
        first = time.monotonic()
        seen: list[bool] = []

        def watched_past_the_duration() -> bool:
            seen.append(watcher.observe("h").dead)
            # Longer than one whole lease, and across renewals that the watcher must see
            # (counted, not timed: a loaded machine renews less often than every period).
            return time.monotonic() - first > 1.3 and lease.renewals > 10

        # A timed window is inherent: 'dead' is only declared once a lease duration passes.
        _until(watched_past_the_duration, "1.3 s of watching across 10 renewals")
        assert not any(seen), f"declared dead at observation {seen.index(True)} of {len(seen)}"
        lease.renew()  # still the holder: nobody wrote its record
    finally:
        lease.end()


def test_a_watcher_declares_a_silent_holder_dead_and_fences_it(cas_box: Mailbox) -> None:
    lease = Lease(cas_box, "leases/h", "h", duration=0.3)
    lease.acquire()  # never started: nothing renews it
    watcher = LeaseWatcher(cas_box, "leases/", duration=0.3)
    assert not watcher.observe("h").dead, "just acquired"
    _until(lambda: watcher.observe("h").dead, "the silent holder declared dead")
    assert watcher.declare_lost("h", "w")
    record = decode_record(cas_box.get("leases/h"))
    assert record is not None
    assert (record["state"], record["lost_by"]) == ("lost", "w")
    with pytest.raises(LeaseLostError, match="declared lost by 'w'"):
        lease.renew()
    with pytest.raises(LeaseLostError):
        lease.ensure_fresh()


def test_a_producer_declared_lost_refuses_its_next_items(cas_box: Mailbox) -> None:
    pipe = Pipeline.over_mailbox(cas_box, ["p"], **{**FAST, "stall_timeout": 3.0})
    producer = pipe.producer("p")
    producer.put(payload("p", 0))
    watcher = LeaseWatcher(cas_box, PRODUCER_LEASES, duration=FAST["lease"])

    def declared() -> bool:
        # The producer renews every 0.1 s; declaring wins once no renewal comes in between.
        watcher.observe("p")
        return watcher.declare_lost("p", "a consumer")

    _until(declared, "the producer's lease swapped to lost")
    refused: list[PipelineAbortedError] = []

    def refuses() -> bool:
        try:
            producer.put(payload("p", 1))
        except PipelineAbortedError as exc:
            refused.append(exc)
            return True
        return False

    # Puts may land until its next renewal (0.1 s) shows the lease was taken; never after.
    _until(refuses, "put() refused after the producer was declared lost")
    assert "was declared lost" in str(refused[0])
    with pytest.raises(PipelineAbortedError):
        producer.put(payload("p", 2))


def test_a_holder_renews_again_after_a_store_outage_and_is_not_declared_lost(
    cas_box: Mailbox,
) -> None:
    """The store fails every renewal for a few periods, fewer than a lease, then answers
    again. The background thread keeps trying: ``renew_error`` reports the outage while it
    lasts and is cleared once a renewal lands, and an observer that watched the record
    from before the outage cannot declare the holder lost."""
    outage = Outage(cas_box, only="leases/h")
    lease = Lease(outage, "leases/h", "h", duration=3.0, period=0.02)  # type: ignore[arg-type]
    lease.acquire()
    watcher = LeaseWatcher(cas_box, "leases/", duration=3.0)
    watcher.observe("h")
    outage.down.set()
    lease.start()
    try:
        assert outage.failed.wait(BOUND), "the renewal thread stopped at its first failure"
        assert isinstance(lease.renew_error, BackendError)
        during = lease.renewals
        outage.down.clear()
        _until(lambda: lease.renewals >= during + 2, "two renewals once the store answers")
        assert lease.renew_error is None, "renewals land again, yet the outage is reported"
        assert not watcher.declare_lost("h", "w"), "declared lost although it renewed"
    finally:
        lease.end()
    assert not lease.lost
