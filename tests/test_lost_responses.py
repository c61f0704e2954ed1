"""The shared lost-response machinery in BaseMailbox, driven by a fault-injecting backend.

Cloud backends are tested against real SDK retry paths through an HTTP proxy (test_s3.py,
test_gcs.py, test_azure.py). Here the same decision logic is pinned down exactly: a write
that landed is never reported lost, and an undecidable one raises OutcomeUnknownError.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from gradientmail import (
    BackendError,
    EndpointUnreachableError,
    OutcomeUnknownError,
    TransientBackendError,
    Version,
)
from gradientmail.backends.memory import MemoryMailbox
from gradientmail.mailbox import Conflict, RetryPolicy, Stat

Fault = Callable[[], None]


class FaultyMailbox(MemoryMailbox):
    """Memory mailbox whose conditional writes can land and then 'lose' their response."""

    retry_policy = RetryPolicy(attempts=3, base_delay=0.0, max_delay=0.0)

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.create_plan: list[str] = []  # per attempt: "ok", "commit-then-drop", "refuse"
        self.conflict_kind = Conflict.LOST
        self.stat_fails = False
        self.attempts = 0

    def _create(self, key: str, data: bytes, write_id: str) -> Version | Conflict:
        self.attempts += 1
        step = self.create_plan.pop(0) if self.create_plan else "ok"
        if step == "refuse":
            raise EndpointUnreachableError("connection refused", key=key)
        if step == "timeout":
            raise TransientBackendError("read timeout", key=key)
        outcome = super()._create(key, data, write_id)
        if step == "commit-then-drop":
            raise TransientBackendError("connection reset after send", key=key)
        if isinstance(outcome, Conflict):
            return self.conflict_kind
        return outcome

    def _stat(self, key: str) -> Stat | None:
        if self.stat_fails:
            raise TransientBackendError("read back failed", key=key)
        return super()._stat(key)


@pytest.fixture
def faulty(request: pytest.FixtureRequest) -> FaultyMailbox:
    return FaultyMailbox(f"faulty-{request.node.name}")


def test_committed_write_whose_response_was_lost_is_reported_won(faulty: FaultyMailbox) -> None:
    faulty.create_plan = ["commit-then-drop"]  # the retry then meets "already exists"
    assert faulty.put_if_absent("k", b"mine") is True
    assert faulty.get("k") == b"mine"
    assert faulty.attempts == 2


def test_someone_elses_object_after_a_retry_is_a_loss(faulty: FaultyMailbox) -> None:
    other = MemoryMailbox(faulty.name)
    other.put_if_absent("k", b"theirs")
    faulty.create_plan = ["timeout"]
    assert faulty.put_if_absent("k", b"mine") is False


def test_sdk_level_retry_conflict_is_resolved_by_reading_back(faulty: FaultyMailbox) -> None:
    # The SDK retried internally: the store says "exists" but the object may be ours.
    faulty.conflict_kind = Conflict.AFTER_RETRY
    faulty.create_plan = ["commit-then-drop"]
    assert faulty.put_if_absent("k", b"mine") is True
    other = MemoryMailbox(faulty.name)
    assert other.put_if_absent("j", b"theirs")
    assert faulty.put_if_absent("j", b"mine") is False


def test_first_attempt_conflict_is_a_plain_loss_without_reading_back(faulty: FaultyMailbox) -> None:
    MemoryMailbox(faulty.name).put_if_absent("k", b"theirs")
    faulty.stat_fails = True  # a read-back would raise: proves none happens
    assert faulty.put_if_absent("k", b"mine") is False


def test_undecidable_outcome_raises_instead_of_returning_false(faulty: FaultyMailbox) -> None:
    faulty.create_plan = ["commit-then-drop"]
    faulty.stat_fails = True
    with pytest.raises(OutcomeUnknownError) as info:
        faulty.put_if_absent("k", b"mine")
    assert isinstance(info.value, BackendError)
    assert info.value.key == "k"


def test_all_attempts_timed_out_and_key_missing_is_unknown(faulty: FaultyMailbox) -> None:
    faulty.create_plan = ["timeout", "timeout", "timeout"]
    with pytest.raises(OutcomeUnknownError, match="in flight"):
        faulty.put_if_absent("k", b"mine")


def test_refused_connections_never_sent_so_the_error_is_plain(faulty: FaultyMailbox) -> None:
    faulty.create_plan = ["refuse", "refuse", "refuse"]
    with pytest.raises(EndpointUnreachableError):
        faulty.put_if_absent("k", b"mine")
    assert list(faulty.list()) == []


def test_transient_failure_then_success_is_retried(faulty: FaultyMailbox) -> None:
    faulty.create_plan = ["refuse", "ok"]
    assert faulty.put_if_absent("k", b"mine") is True
    assert faulty.attempts == 2


class FaultyCas(MemoryMailbox):
    retry_policy = RetryPolicy(attempts=3, base_delay=0.0, max_delay=0.0)
    drop_after_commit = 0

    def _replace(
        self, key: str, data: bytes, version: Version, write_id: str
    ) -> Version | Conflict:
        outcome = super()._replace(key, data, version, write_id)
        if self.drop_after_commit:
            self.drop_after_commit -= 1
            raise TransientBackendError("response lost", key=key)
        return outcome


def test_cas_whose_response_was_lost_returns_the_new_version() -> None:
    box = FaultyCas("faulty-cas-1")
    box.put("c", b"1")
    _, version = box.get_versioned("c")
    box.drop_after_commit = 1
    new = box.put_if_match("c", b"2", version)
    assert new is not None
    assert box.get_versioned("c") == (b"2", new)


def test_cas_lost_response_overwritten_by_another_writer_is_unknown() -> None:
    box = FaultyCas("faulty-cas-2")
    box.put("c", b"1")
    _, version = box.get_versioned("c")

    class Interloper(FaultyCas):
        def _replace(
            self, key: str, data: bytes, version: Version, write_id: str
        ) -> Version | Conflict:
            MemoryMailbox._replace(self, key, data, version, write_id)
            # Our write landed; before we can read back, someone else replaces it.
            MemoryMailbox(self.name).put(key, b"someone else")
            raise TransientBackendError("response lost", key=key)

    with pytest.raises(OutcomeUnknownError, match="replaced"):
        Interloper("faulty-cas-2").put_if_match("c", b"2", version)
    assert outcome_is_not_reported_as_stale(box)


def outcome_is_not_reported_as_stale(box: MemoryMailbox) -> bool:
    return box.get("c") == b"someone else"


def test_retry_policy_backs_off_with_full_jitter() -> None:
    policy = RetryPolicy(attempts=5, base_delay=0.1, max_delay=0.3)
    for attempt in range(5):
        bound = min(0.3, 0.1 * 2**attempt)
        delays = [policy.delay(attempt) for _ in range(200)]
        assert all(0.0 <= d <= bound for d in delays)
        assert max(delays) > bound / 2  # really spread out, not a constant
