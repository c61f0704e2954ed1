"""``Session``: registration, cheap steps, periodic progress, finished/failed."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from gradientmail import ConfigurationError, InvalidKeyError, Mailbox, TransientBackendError
from gradientmail.patterns.shared_queue import shared_queue
from gradientmail.session import Session, active_session


def record(box: Mailbox, learner: str) -> dict[str, Any]:
    return json.loads(box.get(f"learners/{learner}"))  # type: ignore[no-any-return]


def wait_for(predicate: Callable[[], bool], timeout: float) -> bool:
    """Poll ``predicate`` until it holds or ``timeout`` passes (a condition on the store)."""
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while time.monotonic() < deadline:
        if predicate():
            return True
        pause.wait(0.01)
    return predicate()


class CountingMailbox:
    """Counts writes, and can fail them on demand."""

    def __init__(self, inner: Mailbox) -> None:
        self.inner = inner
        self.puts = 0
        self.fail_puts = False

    def put(self, key: str, data: bytes) -> None:
        self.puts += 1
        if self.fail_puts:
            raise TransientBackendError("injected: store down", key=key)
        self.inner.put(key, data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_entering_registers_the_learner(box: Mailbox) -> None:
    before = time.time()
    with Session(box, "node-0", publish_every=60):
        body = record(box, "node-0")
        assert body["state"] == "running"
        assert body["learner"] == "node-0"
        assert before <= body["started_at"] <= time.time()
        assert body["finished_at"] is None
        assert body["steps"] == body["samples"] == 0


def test_progress_appears_within_the_publish_period_and_steps_make_no_store_call(
    box: Mailbox,
) -> None:
    counting = CountingMailbox(box)
    session = ObservedSession(counting, "node-0", publish_every=0.3)  # type: ignore[arg-type]
    with session:
        puts_before = counting.puts
        for _ in range(1000):
            session.step(samples=4)
        assert counting.puts == puts_before, "step() never writes to the store"
        # Within the publish period, counted in periods: the first periodic check may have
        # begun before the steps; the second saw them and published; the third begins
        # after that publish. So by then the record shows them, while the session runs:
        # far from "only on exit".
        assert session.wait_for_checks(3), "the publisher stopped checking (a hang)"
        body = record(box, "node-0")
        assert body["samples"] == 4000
        assert body["steps"] == 1000
        assert body["state"] == "running"
        assert body["rate"] > 0
    assert record(box, "node-0")["state"] == "finished"


class ObservedSession(Session):
    """Counts the publisher's periodic checks, so a test can wait for periods to pass."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.checks = 0
        self.checked = threading.Condition()

    def _changed(self) -> bool:
        changed = super()._changed()
        with self.checked:
            self.checks += 1
            self.checked.notify_all()
        return changed

    def wait_for_checks(self, n: int, timeout: float = 10) -> bool:
        """Wait until the publisher has made ``n`` more periodic checks."""
        with self.checked:
            target = self.checks + n
            return self.checked.wait_for(lambda: self.checks >= target, timeout)


def test_unchanged_progress_is_not_republished(box: Mailbox) -> None:
    counting = CountingMailbox(box)
    session = ObservedSession(counting, "quiet", publish_every=0.05)  # type: ignore[arg-type]
    with session:
        session.step(samples=1)
        assert wait_for(lambda: record(box, "quiet")["samples"] == 1, timeout=5)
        published = counting.puts
        # Five periods pass with no progress (the publisher looked five times and saw no
        # change): nothing new is written.
        assert session.wait_for_checks(5)
        assert counting.puts == published
        # The same publisher does write once something changes: the check above could fail.
        session.step(samples=1)
        # Three checks: the first may have begun before the step; the third begins after
        # the second (which saw the step) has published.
        assert session.wait_for_checks(3)
        assert counting.puts == published + 1
        assert record(box, "quiet")["samples"] == 2


def test_exit_records_finished(box: Mailbox) -> None:
    with Session(box, "ok", publish_every=60) as session:
        session.step(samples=3)
    body = record(box, "ok")
    assert body["state"] == "finished"
    assert body["error"] is None
    assert body["samples"] == 3
    assert body["finished_at"] >= body["started_at"]


class Diverged(RuntimeError):
    pass


def test_exit_by_exception_records_failed_with_the_error_type(box: Mailbox) -> None:
    with pytest.raises(Diverged), Session(box, "bad", publish_every=60):
        raise Diverged("loss is nan")
    body = record(box, "bad")
    assert body["state"] == "failed"
    assert body["error"].endswith("Diverged")
    assert "nan" not in json.dumps(body), "only the type is recorded"


def test_publisher_thread_ends_on_exit(box: Mailbox) -> None:
    with Session(box, "t", publish_every=0.05):
        pass
    alive = [t for t in threading.enumerate() if t.name.startswith("gradientmail-session")]
    assert alive == []


def test_a_failing_periodic_publish_does_not_interrupt_training(box: Mailbox) -> None:
    counting = CountingMailbox(box)
    with Session(counting, "flaky", publish_every=0.05) as session:  # type: ignore[arg-type]
        counting.fail_puts = True
        session.step(samples=1)
        assert wait_for(lambda: session.publish_error is not None, timeout=5)
        assert isinstance(session.publish_error, TransientBackendError)
        assert "injected" in str(session.publish_error)
        session.step(samples=1)  # training goes on
        assert record(box, "flaky")["samples"] == 0, "nothing reached the store meanwhile"
        counting.fail_puts = False
        # The next period retries on its own, before the exit publishes anything.
        assert wait_for(lambda: record(box, "flaky")["samples"] == 2, timeout=5)
        assert wait_for(lambda: session.publish_error is None, timeout=5)
        assert record(box, "flaky")["state"] == "running"
    assert record(box, "flaky")["samples"] == 2
    assert record(box, "flaky")["state"] == "finished"


def test_composes_with_shared_queue_and_records_units(box: Mailbox) -> None:
    units = {f"lane0-{i}": i for i in range(4)}
    session = Session(box, "node-0", publish_every=60)
    with (
        session,
        shared_queue(units, mailbox=box, learner_id="node-0", load=lambda u: [u, u]) as items,
    ):
        assert active_session("node-0") is session
        for _ in items:
            session.step(samples=1)
    assert active_session("node-0") is None
    body = record(box, "node-0")
    assert body["units_claimed"] == 4
    assert body["units_finished"] == 4
    assert body["samples"] == 8
    assert sorted(entry[0] for entry in body["units"]) == sorted(units), "one entry per unit"
    for identifier, claimed, started, finished, reclaimed, epoch in body["units"]:
        assert epoch == 0
        assert identifier in units
        assert body["started_at"] <= claimed <= started <= finished <= body["finished_at"]
        assert reclaimed is False


def test_a_unit_given_back_after_its_last_item_is_not_counted_finished(box: Mailbox) -> None:
    """A DataLoader worker hands a unit's last item over, then gives the unit back because
    torch dropped its batch: the session reports it neither finished nor held, so the
    learners' finished counts add up to the units done."""
    session = Session(box, "r-w0", publish_every=60)
    with session:
        for unit in ("kept", "dropped"):
            session.unit_claimed(unit, reclaimed=False)
            session.unit_started(unit)
            session.unit_finished(unit, items=3)
        session.unit_released("dropped")
        assert session.units_finished == 1
    body = record(box, "r-w0")
    assert body["units_finished"] == 1
    assert [entry[0] for entry in body["units"]] == ["kept"]


def test_a_queue_reports_only_to_the_session_of_its_learner(box: Mailbox) -> None:
    units = {"u": 1}
    with (
        pytest.warns(RuntimeWarning, match="found an active Session for 'a', not for 'b'"),
        Session(box, "a", publish_every=60) as a,
        shared_queue(units, mailbox=box, learner_id="b", load=lambda u: [u]) as items,
    ):
        list(items)
    assert a.units_claimed == 0


def test_bad_arguments(box: Mailbox) -> None:
    with pytest.raises(InvalidKeyError, match="learner id"):
        Session(box, "a/b")
    with pytest.raises(ConfigurationError, match="publish_every"):
        Session(box, "a", publish_every=0)
    session = Session(box, "once", publish_every=60)
    with session:
        pass
    with pytest.raises(ConfigurationError, match="already entered"), session:
        pass  # pragma: no cover - never entered


def test_a_session_entered_after_its_queue_warns_naming_both(box: Mailbox) -> None:
    units = {"u": 1}
    with shared_queue(units, mailbox=box, learner_id="q", load=lambda u: [u]) as items:
        with (
            pytest.warns(
                RuntimeWarning, match=r"Session 'q' was entered while a shared_queue for 'q'"
            ),
            Session(box, "q", publish_every=60) as late,
        ):
            list(items)
        assert late.units_claimed == 0
