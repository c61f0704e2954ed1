"""A restart with the same id takes the lease over only once the earlier incarnation can no
longer trust it: a paused earlier incarnation that wakes after the takeover delivers nothing.

It once took over after 1.5 renewal periods (half a lease for a queue learner; 1.5 s of a
pipeline consumer's 15 s lease), while the paused one trusted its last renewal for three
quarters of a lease: in that window both delivered.
"""

from __future__ import annotations

import logging
import time

import pytest

from gradientmail import LeaseLostError, Mailbox
from gradientmail.patterns._leases import SAFE_FRACTION, TAKEOVER_FRACTION, Lease

#: (duration, period): a shared_queue learner's (period = duration / 3), and a pipeline
#: consumer's shipped ratio (heartbeat 1 s for a 15 s lease), scaled to a 1.5 s lease.
SETTINGS = [(1.5, None), (1.5, 0.1)]


@pytest.fixture
def box(local_box: Mailbox) -> Mailbox:
    """``memory://`` and ``file://``: the mechanism is gradientmail's own, above the
    Mailbox interface (see ``tests.support.rigs.local_rig``)."""
    return local_box


@pytest.mark.parametrize(("duration", "period"), SETTINGS, ids=["queue", "pipeline"])
def test_the_earlier_incarnation_is_stale_when_the_new_one_takes_over(
    box: Mailbox, duration: float, period: float | None
) -> None:
    old = Lease(box, "leases/node-0", "node-0", duration=duration, period=period)
    old.acquire()  # then "paused": no renewal follows
    new = Lease(box, "leases/node-0", "node-0", duration=duration, period=period)
    new.acquire()
    assert new.incarnation == old.incarnation + 1
    # The takeover came only once the earlier one's trust in its last renewal ran out, so
    # on waking it renews first, learns it was replaced, and stops.
    with pytest.raises(LeaseLostError, match="newer incarnation"):
        old.ensure_fresh()
    new.ensure_fresh()


@pytest.mark.parametrize(("duration", "period"), SETTINGS, ids=["queue", "pipeline"])
def test_a_restart_acts_no_sooner_than_its_earlier_incarnation_stops_trusting_its_renewal(
    box: Mailbox, duration: float, period: float | None
) -> None:
    """Counted from before the earlier incarnation's last renewal was sent (the moment it
    trusts it from), the restart holds the lease no sooner than that trust runs out: a
    lower bound on a wait, which a slow machine only lengthens."""
    began = time.monotonic()
    Lease(box, "leases/node-1", "node-1", duration=duration, period=period).acquire()
    Lease(box, "leases/node-1", "node-1", duration=duration, period=period).acquire()
    assert time.monotonic() - began >= SAFE_FRACTION * duration


def test_the_wait_is_logged_at_info_with_its_length(
    box: Mailbox, caplog: pytest.LogCaptureFixture
) -> None:
    Lease(box, "leases/n", "n", duration=0.6).acquire()
    with caplog.at_level(logging.INFO, logger="gradientmail.patterns._leases"):
        Lease(box, "leases/n", "n", duration=0.6).acquire()
    (line,) = [r.getMessage() for r in caplog.records if "waits up to" in r.getMessage()]
    assert f"waits up to {TAKEOVER_FRACTION * 0.6:.1f} s for its earlier incarnation" in line
    assert "'leases/n'" in line


def test_a_live_earlier_incarnation_is_refused_at_its_next_renewal(box: Mailbox) -> None:
    from gradientmail import ConfigurationError

    live = Lease(box, "leases/dup", "dup", duration=1.5, period=0.1)
    live.acquire()
    live.start()
    try:
        with pytest.raises(ConfigurationError, match="already running"):
            Lease(box, "leases/dup", "dup", duration=1.5, period=0.1).acquire()
    finally:
        live.end()


def test_a_live_holder_that_ends_while_the_new_one_waits_is_named_at_warning(
    box: Mailbox, caplog: pytest.LogCaptureFixture
) -> None:
    """A short overlap of two live processes with one id: the first ends while the second
    watches it. The second goes on (a restart racing its own shutdown looks the same), but
    says so: silently, it would train what is left, often nothing, and exit 0."""
    from tests.support.interleave import Interleave

    first = Lease(box, "leases/twin", "twin", duration=1.5, period=0.1)
    first.acquire()
    # The second's first look at the record, then the first one ends, as a finished run does.
    watching = Interleave(box, "get_versioned", "leases/twin", lambda: first.end("finished"))
    second = Lease(watching, "leases/twin", "twin", duration=1.5, period=0.1)
    with caplog.at_level(logging.INFO, logger="gradientmail.patterns._leases"):
        second.acquire()
    assert watching.ran.is_set()
    assert second.incarnation == first.incarnation + 1
    (line,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    message = line.getMessage()
    assert "'twin' found another process with its id" in message
    assert "ended (finished) while this one waited" in message
    assert "two processes share one id" in message


def test_a_restart_after_a_clean_end_says_nothing_at_warning(
    box: Mailbox, caplog: pytest.LogCaptureFixture
) -> None:
    first = Lease(box, "leases/again", "again", duration=1.5, period=0.1)
    first.acquire()
    first.end("finished")
    with caplog.at_level(logging.INFO, logger="gradientmail.patterns._leases"):
        Lease(box, "leases/again", "again", duration=1.5, period=0.1).acquire()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_learner_started_beside_a_twin_that_then_finishes_names_it_at_warning(
    box: Mailbox, caplog: pytest.LogCaptureFixture
) -> None:
    """Through ``shared_queue``: a second process is started with the id of one that is
    still running and then finishes, every unit done, while the second watches its lease.
    The second runs what is left (nothing) and ends normally, and its log says why it
    trained nothing: another process with its id finished while it waited."""
    from contextlib import ExitStack

    from gradientmail.patterns.shared_queue import shared_queue
    from tests.support.interleave import Interleave

    units = {f"u{i}": i for i in range(4)}
    with ExitStack() as first:
        queue = first.enter_context(
            shared_queue(units, mailbox=box, learner_id="twin", load=lambda u: [u], lease=1.5)
        )
        assert sorted(queue) == [0, 1, 2, 3]
        # The second's first look at the lease, then the first leaves its block.
        watching = Interleave(box, "get_versioned", "leases/twin", first.close)
        with (
            caplog.at_level(logging.INFO, logger="gradientmail.patterns._leases"),
            shared_queue(
                units, mailbox=watching, learner_id="twin", load=lambda u: [u], lease=1.5
            ) as second,
        ):
            assert list(second) == []
        assert watching.ran.is_set()
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(
        "'twin' found another process with its id" in m and "two processes share one id" in m
        for m in warned
    ), warned
