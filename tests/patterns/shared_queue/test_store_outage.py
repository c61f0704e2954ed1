"""A store that fails for a while: the learner waits it out, says so, and loses nothing.

An S3 brownout of a few seconds once killed learners whose reads ran out of the mailbox's
retries (about a second of them). The loader and the recorder now keep retrying a
transient failure for up to the lease, logging the outage at WARNING and its end at INFO;
an outage past the lease still reaches the loop as ``WorkerError``
(``test_shared_queue.py::test_mailbox_error_arrives_after_the_items_before_it_chained``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator

import pytest

from gradientmail import Mailbox
from gradientmail.patterns.shared_queue import shared_queue
from tests.support.fault_profiles import ATTEMPTS, PROFILES
from tests.support.faultproxy import FaultProxy, match
from tests.support.outage import Outage

UNITS = {f"u{i:02d}": i for i in range(8)}


@pytest.fixture
def box(local_box: Mailbox) -> Mailbox:
    """``memory://`` and ``file://``: the patience is gradientmail's own, above the
    Mailbox interface (see ``tests.support.rigs.local_rig``)."""
    return local_box


def test_a_store_outage_shorter_than_the_lease_loses_nothing_and_is_logged(
    box: Mailbox, caplog: pytest.LogCaptureFixture
) -> None:
    outage = Outage(box)
    got: list[tuple[str, int]] = []

    def load(n: int) -> Iterator[tuple[str, int]]:
        yield from ((f"u{n:02d}", k) for k in range(3))

    def end_outage() -> None:
        outage.failed.wait(30)
        outage.down.clear()

    ender = threading.Thread(target=end_outage)
    caplog.set_level(logging.INFO, logger="gradientmail.patterns._patience")
    with shared_queue(
        UNITS,
        mailbox=outage,  # type: ignore[arg-type]
        learner_id="a",
        load=load,
        prefetch=1,
    ) as queue:
        for item in queue:
            got.append(item)
            if len(got) == 1:
                # The loader, one item ahead, next records or claims into an outage; it
                # ends once the store has failed FAILURES calls.
                outage.down.set()
                ender.start()
        assert queue.stats.units_finished == len(UNITS)
    ender.join()
    assert outage.failed.is_set(), "nothing called the store during the outage"
    assert sorted(got) == sorted((f"u{n:02d}", k) for n in UNITS.values() for k in range(3))
    assert len(got) == len(set(got)), "an item was delivered twice"
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert any("retrying for up to 60 s" in r.getMessage() for r in warnings), warnings
    assert any("learner 'a'" in r.getMessage() for r in warnings)
    assert any("answered" in r.getMessage() and "again" in r.getMessage() for r in caplog.records)
    assert not any("giving up" in r.getMessage() for r in warnings)


@pytest.mark.parametrize("store", ["s3", "gcs", "azure"])
def test_a_burst_of_503s_on_the_wire_is_waited_out(
    request: pytest.FixtureRequest, store: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The same through the real SDKs: a proxy answers 503 to every request for as many as
    four calls' retries, mid-run; the learner waits, then finishes every unit once."""
    profile = PROFILES[store]
    burst = 4 * ATTEMPTS
    with FaultProxy(request.getfixturevalue(profile.endpoint)) as proxy:
        box = profile.open_through(request.getfixturevalue(profile.rig), proxy.url)
        caplog.set_level(logging.INFO, logger="gradientmail.patterns._patience")
        got: list[int] = []
        with shared_queue(UNITS, mailbox=box, learner_id="a", load=lambda n: [n], prefetch=1) as q:
            for item in q:
                got.append(item)
                if len(got) == 1:
                    rule = proxy.fail(match(), 503, times=burst)
        assert rule.hits == burst, "the burst was not spent inside the run"
    assert sorted(got) == sorted(UNITS.values())
    messages = [r.getMessage() for r in caplog.records]
    assert any("retrying for up to 60 s" in m for m in messages), messages
    assert any("answered" in m and "again" in m for m in messages), messages


@pytest.mark.parametrize("down", ["", "leases/"], ids=["store", "leases"])
def test_a_learner_that_starts_during_an_outage_waits_for_the_store_and_runs(
    box: Mailbox, caplog: pytest.LogCaptureFixture, down: str
) -> None:
    """The manifest and the lease are written through the same patience as the loader: a
    learner started while the store (or only its lease) is down waits, says so, then runs
    the job."""
    outage = Outage(box, only=down or None)
    outage.down.set()

    def end_outage() -> None:
        outage.failed.wait(30)
        outage.down.clear()

    ender = threading.Thread(target=end_outage)
    ender.start()
    caplog.set_level(logging.INFO, logger="gradientmail.patterns._patience")
    with shared_queue(
        UNITS,
        mailbox=outage,  # type: ignore[arg-type]
        learner_id="a",
        load=lambda n: [n],
    ) as queue:
        got = list(queue)
    ender.join()
    assert sorted(got) == sorted(UNITS.values())
    assert queue.stats.run_complete
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    who = "lease 'leases/a'" if down else "learner 'a'"
    assert any(who in m and "retrying for up to 60 s" in m for m in messages), messages
    assert not any("giving up" in m for m in messages)
