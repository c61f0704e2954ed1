"""A learner fenced because it could not renew: its loop sees ``LeaseLostError``, and its
lease never reads ``finished``, nor ``released`` as if it had left early: ``gradientmail
status`` shows it failed.

The fence is reached on a clock the test drives: the lease's last renewal is made stale
while every lease write fails, as it would in a partition.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from gradientmail import BackendError, LeaseLostError, Mailbox
from gradientmail.patterns._leases import SAFE_FRACTION
from gradientmail.patterns.shared_queue import shared_queue
from gradientmail.status import format_status, read_status
from tests.support.clock import FakeClock
from tests.support.delegating import Delegating

UNITS = {f"u{i}": i for i in range(6)}
LEASE = 30.0


@pytest.fixture
def box(local_box: Mailbox) -> Mailbox:
    """``memory://`` and ``file://``: the fence is gradientmail's own."""
    return local_box


class FailingLeaseWrites(Delegating):
    """Fails every write to ``leases/`` while :attr:`down`."""

    down = True

    def put_if_match(self, key: str, *args: Any, **kwargs: Any) -> Any:
        if self.down and key.startswith("leases/"):
            raise BackendError("the store is down (injected)", key=key)
        return self.inner.put_if_match(key, *args, **kwargs)


def _fence(queue: Any, box: Mailbox) -> FailingLeaseWrites:
    """Make the queue's lease stale on a clock the test drives, with its writes failing."""
    lease = queue._lease
    clock = FakeClock(time.monotonic())
    lease.clock = clock
    failing = FailingLeaseWrites(box)
    lease.mailbox = failing
    clock.advance(SAFE_FRACTION * LEASE + 1)
    return failing


@pytest.mark.parametrize("back_for_close", [False, True], ids=["store-down", "store-back"])
def test_a_learner_fenced_for_a_stale_lease_raises_lease_lost_and_never_reads_finished(
    box: Mailbox, back_for_close: bool
) -> None:
    got: list[int] = []
    with (  # noqa: PT012 - the error comes from the loop, after the fence is set up
        pytest.raises(LeaseLostError, match="could not renew"),
        shared_queue(
            UNITS, mailbox=box, learner_id="a", load=lambda n: [n], prefetch=1, lease=LEASE
        ) as q,
    ):
        got.append(next(iter(q)))
        failing = _fence(q, box)
        try:
            got.extend(q)
        finally:
            failing.down = not back_for_close
    assert len(got) < len(UNITS), "a fenced learner went on delivering"
    state = json.loads(box.get("leases/a"))["state"]
    assert state != "finished", "a fenced learner's lease says it finished"
    if back_for_close:
        assert state == "failed"


def test_status_shows_a_learner_fenced_at_its_first_item_failed_not_released(
    box: Mailbox,
) -> None:
    """Fenced before it delivered anything, the store back by the time it closes: the
    learner did not choose to leave, so ``status`` must not read as an early exit."""
    with (  # noqa: PT012 - the error comes from the loop, after the fence is set up
        pytest.raises(LeaseLostError),
        shared_queue(
            UNITS, mailbox=box, learner_id="a", load=lambda n: [n], prefetch=1, lease=LEASE
        ) as q,
    ):
        failing = _fence(q, box)
        try:
            next(iter(q))
        finally:
            failing.down = False  # the store is back for the close
    status = read_status(box)
    (row,) = [r for r in status.learners if r["learner"] == "a"]
    assert row["state"] == "failed", row
    assert "released" not in format_status(status)
