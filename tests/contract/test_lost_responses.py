"""The shared lost-response machinery in BaseMailbox, driven by a fault-injecting backend.

Cloud backends are tested against their real SDKs through an HTTP proxy
(test_cloud_faults.py). Here the same decision logic is pinned down exactly, one test per
branch: a write that landed is never reported lost, a foreign object found after an
ambiguous attempt is never reported as a loss, and an undecidable outcome raises
OutcomeUnknownError. What the store holds is always checked through an independent handle,
by the write id stamped on the stored object: a foreign writer here stores the very bytes
we tried to write, so only the write id tells the two writes apart, as it must.
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
from gradientmail.backends._base import Conflict, RetryPolicy, Stat
from gradientmail.backends.memory import MemoryMailbox


def _throttled(key: str) -> TransientBackendError:
    """What a store's "slow down" answer maps to: retry, and nothing was stored."""
    error = TransientBackendError("503 slow down", key=key)
    error.not_carried_out = True
    return error


class FaultyMailbox(MemoryMailbox):
    """Memory mailbox whose conditional writes can land and then 'lose' their response."""

    retry_policy = RetryPolicy(attempts=3, base_delay=0.0, max_delay=0.0)

    def __init__(self, name: str) -> None:
        super().__init__(name)
        # Per attempt: "ok", "commit-then-drop", "refuse", "timeout" or "throttled".
        self.create_plan: list[str] = []
        self.conflict_kind = Conflict.LOST
        #: Runs after a "commit-then-drop" attempt stored our write, before the response
        #: is lost: another client acting between our attempt and its retry.
        self.after_commit: Callable[[], None] | None = None
        self.stat_fails = False
        self.attempts = 0
        self.stats = 0
        #: The write id of every attempt, in order: one call's retries must reuse it.
        self.write_ids: list[str] = []

    def _create(self, key: str, data: bytes, write_id: str) -> Version | Conflict:
        self.attempts += 1
        self.write_ids.append(write_id)
        step = self.create_plan.pop(0) if self.create_plan else "ok"
        if step == "refuse":
            raise EndpointUnreachableError("connection refused", key=key)
        if step == "timeout":
            raise TransientBackendError("read timeout", key=key)
        if step == "throttled":
            raise _throttled(key)
        outcome = super()._create(key, data, write_id)
        if step == "commit-then-drop":
            if self.after_commit is not None:
                self.after_commit()
            raise TransientBackendError("connection reset after send", key=key)
        if isinstance(outcome, Conflict):
            return self.conflict_kind
        return outcome

    def _stat(self, key: str) -> Stat | None:
        self.stats += 1
        if self.stat_fails:
            raise TransientBackendError("read back failed", key=key)
        return super()._stat(key)


@pytest.fixture
def faulty(request: pytest.FixtureRequest) -> FaultyMailbox:
    return FaultyMailbox(f"faulty-{request.node.name}")


@pytest.fixture
def other(faulty: FaultyMailbox) -> MemoryMailbox:
    """An independent handle on the same store: another client, and the test's witness."""
    return MemoryMailbox(faulty.name)


def stored_write_id(box: MemoryMailbox, key: str) -> str | None:
    """The write id of the object stored at ``key``, as the store records it."""
    stat = box._stat(key)
    assert stat is not None, f"{key!r} is missing"
    return stat.write_id


def foreign_write(other: MemoryMailbox, key: str, data: bytes) -> str | None:
    """Another client creates ``key`` holding ``data``; returns its write id."""
    assert other.put_if_absent(key, data)
    return stored_write_id(other, key)


def ours(faulty: FaultyMailbox) -> str:
    """The one write id every attempt of the faulty handle's single call used."""
    assert faulty.write_ids, "no attempt was made"
    assert set(faulty.write_ids) == {faulty.write_ids[0]}, "a retry changed the write id"
    return faulty.write_ids[0]


def test_committed_write_whose_response_was_lost_is_reported_won(
    faulty: FaultyMailbox, other: MemoryMailbox
) -> None:
    faulty.create_plan = ["commit-then-drop"]  # the retry then meets "already exists"
    assert faulty.put_if_absent("k", b"mine") is True
    assert faulty.attempts == 2
    assert faulty.stats == 1
    assert stored_write_id(other, "k") == ours(faulty)
    assert other.get("k") == b"mine"


def test_foreign_object_after_an_ambiguous_attempt_is_unknown_not_a_loss(
    faulty: FaultyMailbox, other: MemoryMailbox
) -> None:
    # The timed-out attempt did not land here, but nothing the client can see says so: it
    # may have landed and been replaced, so False would be a guess. The other writer
    # stored the same bytes: a client judging by the bytes would wrongly claim the win.
    theirs = foreign_write(other, "k", b"mine")
    faulty.create_plan = ["timeout"]
    with pytest.raises(OutcomeUnknownError, match="another writer's object"):
        faulty.put_if_absent("k", b"mine")
    assert faulty.attempts == 2
    assert ours(faulty) != theirs
    assert stored_write_id(other, "k") == theirs, "the other writer's object was disturbed"


@pytest.mark.parametrize("interference", ["put", "delete-and-create"])
def test_landed_write_replaced_before_the_retry_is_unknown_never_false(
    faulty: FaultyMailbox, other: MemoryMailbox, interference: str
) -> None:
    theirs: list[str | None] = []

    def another_client() -> None:
        assert stored_write_id(other, "k") == faulty.write_ids[0], "our first attempt landed"
        if interference == "put":
            other.put("k", b"mine")  # the same bytes: only the write id differs
        else:
            other.delete("k")
            assert other.put_if_absent("k", b"mine")
        theirs.append(stored_write_id(other, "k"))

    faulty.create_plan = ["commit-then-drop"]
    faulty.after_commit = another_client
    with pytest.raises(OutcomeUnknownError, match="landed and been replaced"):
        faulty.put_if_absent("k", b"mine")
    assert theirs
    assert theirs[0] != ours(faulty)
    assert stored_write_id(other, "k") == theirs[0], "the other writer's object was disturbed"


def test_conflict_reported_after_an_sdk_retry_is_resolved_by_reading_back(
    faulty: FaultyMailbox, other: MemoryMailbox
) -> None:
    # A plug-in whose SDK retried internally: the store says "exists", the object may be ours.
    faulty.conflict_kind = Conflict.AFTER_RETRY
    faulty.create_plan = ["commit-then-drop"]
    assert faulty.put_if_absent("k", b"mine") is True
    assert stored_write_id(other, "k") == ours(faulty)
    theirs = foreign_write(other, "j", b"mine")
    faulty.write_ids.clear()
    with pytest.raises(OutcomeUnknownError, match="another writer's object"):
        faulty.put_if_absent("j", b"mine")
    assert faulty.stats == 2, "the conflict was resolved by reading the key back"
    assert ours(faulty) != theirs
    assert stored_write_id(other, "j") == theirs


def test_first_attempt_conflict_is_a_plain_loss_without_reading_back(
    faulty: FaultyMailbox, other: MemoryMailbox
) -> None:
    theirs = foreign_write(other, "k", b"theirs")
    faulty.stat_fails = True  # a read-back would raise: proves none happens
    assert faulty.put_if_absent("k", b"mine") is False
    assert faulty.attempts == 1
    assert faulty.stats == 0
    assert stored_write_id(other, "k") == theirs


def test_conflict_after_attempts_the_store_refused_to_carry_out_is_a_plain_loss(
    faulty: FaultyMailbox, other: MemoryMailbox
) -> None:
    # A throttled attempt (503 slow down, 409 conflicting request) certainly stored nothing,
    # so the conflict that follows answers the only request that could have landed.
    theirs = foreign_write(other, "k", b"theirs")
    faulty.create_plan = ["throttled", "refuse"]
    faulty.stat_fails = True
    assert faulty.put_if_absent("k", b"mine") is False
    assert faulty.attempts == 3
    assert faulty.stats == 0
    assert stored_write_id(other, "k") == theirs


def test_every_attempt_refused_to_carry_out_raises_the_last_error(
    faulty: FaultyMailbox, other: MemoryMailbox
) -> None:
    faulty.create_plan = ["throttled", "throttled", "throttled"]
    with pytest.raises(TransientBackendError) as info:
        faulty.put_if_absent("k", b"mine")
    assert not isinstance(info.value, OutcomeUnknownError)
    assert faulty.stats == 0
    assert list(other.list()) == []


def test_undecidable_outcome_raises_instead_of_returning_false(
    faulty: FaultyMailbox, other: MemoryMailbox
) -> None:
    faulty.create_plan = ["commit-then-drop"]
    faulty.stat_fails = True
    with pytest.raises(OutcomeUnknownError) as info:
        faulty.put_if_absent("k", b"mine")
    assert isinstance(info.value, BackendError)
    assert info.value.key == "k"
    # It had landed: False would have been a lie.
    assert stored_write_id(other, "k") == ours(faulty)


def test_all_attempts_timed_out_and_key_missing_is_unknown(
    faulty: FaultyMailbox, other: MemoryMailbox
) -> None:
    faulty.create_plan = ["timeout", "timeout", "timeout"]
    with pytest.raises(OutcomeUnknownError, match="in flight"):
        faulty.put_if_absent("k", b"mine")
    assert list(other.list()) == []


def test_refused_connections_never_sent_so_the_error_is_plain(
    faulty: FaultyMailbox, other: MemoryMailbox
) -> None:
    faulty.create_plan = ["refuse", "refuse", "refuse"]
    with pytest.raises(EndpointUnreachableError):
        faulty.put_if_absent("k", b"mine")
    assert list(other.list()) == []


def test_transient_failure_then_success_is_retried(
    faulty: FaultyMailbox, other: MemoryMailbox
) -> None:
    faulty.create_plan = ["refuse", "ok"]
    assert faulty.put_if_absent("k", b"mine") is True
    assert faulty.attempts == 2
    assert stored_write_id(other, "k") == ours(faulty)
    assert other.get("k") == b"mine"


class FaultyCas(MemoryMailbox):
    retry_policy = RetryPolicy(attempts=3, base_delay=0.0, max_delay=0.0)
    drop_after_commit = 0
    #: Runs after a dropped swap stored our write: another client acting before the retry.
    after_commit: Callable[[], None] | None = None

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.write_ids: list[str] = []

    def _replace(
        self, key: str, data: bytes, version: Version, write_id: str
    ) -> Version | Conflict:
        self.write_ids.append(write_id)
        outcome = super()._replace(key, data, version, write_id)
        if self.drop_after_commit:
            self.drop_after_commit -= 1
            if self.after_commit is not None:
                self.after_commit()
            raise TransientBackendError("response lost", key=key)
        return outcome


@pytest.fixture
def cas(request: pytest.FixtureRequest) -> tuple[FaultyCas, Version]:
    """A mailbox holding ``c`` = ``1``, whose next swap lands and loses its response."""
    box = FaultyCas(f"faulty-cas-{request.node.name}")
    box.put("c", b"1")
    _, version = box.get_versioned("c")
    box.drop_after_commit = 1
    return box, version


def test_cas_whose_response_was_lost_returns_the_new_version(
    cas: tuple[FaultyCas, Version],
) -> None:
    box, version = cas
    new = box.put_if_match("c", b"2", version)
    assert new is not None
    other = MemoryMailbox(box.name)
    assert other.get_versioned("c") == (b"2", new)
    assert len(box.write_ids) == 2, "the retry met the moved version"
    assert stored_write_id(other, "c") == box.write_ids[0] == box.write_ids[1]


@pytest.mark.parametrize(("interference", "reason"), [("put", "replaced"), ("delete", "deleted")])
def test_cas_lost_response_then_another_writer_is_unknown(
    cas: tuple[FaultyCas, Version], interference: str, reason: str
) -> None:
    box, version = cas
    other = MemoryMailbox(box.name)
    theirs: list[str | None] = []

    def another_client() -> None:
        assert stored_write_id(other, "c") == box.write_ids[0], "our swap landed"
        if interference == "put":
            other.put("c", b"2")  # the bytes we swapped in: only the write id differs
            theirs.append(stored_write_id(other, "c"))
        else:
            other.delete("c")

    box.after_commit = another_client
    with pytest.raises(OutcomeUnknownError, match=reason):
        box.put_if_match("c", b"2", version)
    if interference == "put":
        assert stored_write_id(other, "c") == theirs[0] != box.write_ids[0]
    else:
        assert list(other.list()) == [], "a retry must not re-create the deleted key"


def test_retry_policy_backs_off_with_full_jitter() -> None:
    policy = RetryPolicy(attempts=5, base_delay=0.1, max_delay=0.3)
    for attempt in range(5):
        bound = min(0.3, 0.1 * 2**attempt)
        delays = [policy.delay(attempt) for _ in range(200)]
        assert all(0.0 <= d <= bound for d in delays)
        assert max(delays) > bound / 2  # really spread out, not a constant
