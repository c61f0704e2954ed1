"""Logging through ``logging.getLogger("gradientmail")``: silent by default, the documented
records at the documented levels, and never a secret."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from gradientmail import (
    AtomicityViolationError,
    BackendError,
    LeaseLostError,
    Mailbox,
    Session,
    TransientBackendError,
    from_url,
)
from gradientmail._record_codec import encode_record
from gradientmail.patterns._claims import claim, claim_body
from gradientmail.patterns._leases import Lease
from gradientmail.patterns._run_layout import RunLayout
from gradientmail.patterns.shared_queue import shared_queue
from gradientmail.patterns.shared_queue._unit_claims import UnitClaims
from tests.support.rigs import Rig

SECRET = "U0VDUkVULUtFWS1ORVZFUi1MT0dHRUQ="  # base64, as an Azure account key is


def records(caplog: pytest.LogCaptureFixture, level: int) -> list[logging.LogRecord]:
    """gradientmail's records at exactly ``level``."""
    return [r for r in caplog.records if r.name.startswith("gradientmail") and r.levelno == level]


def messages(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in records(caplog, level)]


def wait_until(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    """Poll ``condition`` (a log record appearing) until it holds, or fail."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)  # polling a condition, bounded by the deadline


class BrokenPuts:
    """A mailbox whose ``put`` fails on demand, and whose URL carries a secret in its query
    (a plug-in that forgot to strip it): gradientmail must still never log it."""

    def __init__(self, inner: Mailbox) -> None:
        self.inner = inner
        self.fail = False

    @property
    def url(self) -> str:
        return f"s3://bucket/run?token={SECRET}"

    def put(self, key: str, data: bytes) -> None:
        if self.fail:
            raise TransientBackendError("injected: the store stopped answering", key=key)
        self.inner.put(key, data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_the_library_is_silent_by_default() -> None:
    code = textwrap.dedent(
        """
        import logging, gradientmail
        logging.getLogger("gradientmail.session").warning("a warning nobody configured")
        logging.getLogger("gradientmail").error("an error nobody configured")
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stderr == ""
    assert out.stdout == ""
    handlers = logging.getLogger("gradientmail").handlers
    assert any(isinstance(h, logging.NullHandler) for h in handlers)


def test_retries_and_store_errors_are_debug_and_never_show_the_secret(
    caplog: pytest.LogCaptureFixture,
) -> None:
    pytest.importorskip("azure.storage.blob")
    caplog.set_level(logging.DEBUG, logger="gradientmail")
    secret_string = (
        "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;"
        f"AccountKey={SECRET};BlobEndpoint=http://127.0.0.1:9/devstoreaccount1"
    )
    box = from_url(f"az://gm-logs/run?connection_string={secret_string}")
    with pytest.raises(BackendError):
        box.get("units/u0")  # nothing listens on port 9: every attempt fails
    retries = messages(caplog, logging.DEBUG)
    assert any("retrying" in m and "attempt 1 of" in m for m in retries), retries
    assert any("giving up" in m for m in retries), retries
    assert records(caplog, logging.WARNING) == []
    for record in caplog.records:
        if record.name.startswith("gradientmail"):
            assert SECRET not in record.getMessage()
            assert "AccountKey" not in record.getMessage()


def test_a_failed_progress_write_is_a_warning_once_per_streak_without_the_secret(
    rig_memory: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="gradientmail")
    box = BrokenPuts(rig_memory.fresh())
    with Session(box, "node-0", publish_every=0.02) as session:  # type: ignore[arg-type]
        box.fail = True
        session.step(samples=1)  # something to publish
        wait_until(lambda: bool(records(caplog, logging.WARNING)))
        session.step(samples=1)
        wait_until(lambda: any("could not publish" in m for m in messages(caplog, logging.DEBUG)))
        box.fail = False
    warnings = messages(caplog, logging.WARNING)
    assert len(warnings) == 1  # once per failing streak; the repeats are DEBUG
    assert "'node-0' could not publish its progress" in warnings[0]
    assert "s3://bucket/run" in warnings[0]
    for record in caplog.records:
        assert SECRET not in record.getMessage()


def test_a_lost_lease_is_a_warning(rig_file: Rig, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="gradientmail")
    box = rig_file.fresh()
    first = Lease(box, "leases/node-0", "node-0", duration=60)
    first.acquire()
    second = Lease(box, "leases/node-0", "node-0", duration=60)
    # Make the record read as long dead, so the second takes over at once.
    stale = {"holder": "node-0", "state": "running", "renewed_at": 0, "incarnation": 1}
    box.put("leases/node-0", encode_record({**stale, "lease": 60}))
    second.acquire()
    with pytest.raises(LeaseLostError):
        first.renew()
    (warning,) = messages(caplog, logging.WARNING)
    assert "'node-0' lost its lease 'leases/node-0'" in warning


def test_units_taken_over_from_a_dead_learner_are_warnings(
    rig_file: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="gradientmail")
    box = rig_file.fresh()
    units = {f"u{i}": i for i in range(4)}
    ghost = Lease(box, "leases/ghost", "ghost", duration=0.3)
    ghost.acquire()  # and never renewed: the learner died
    UnitClaims(box, RunLayout(0), "ghost", ghost.incarnation).claim("u0")
    with shared_queue(units, mailbox=box, learner_id="alive", load=lambda u: [u], lease=0.3) as q:
        assert sorted(q) == [0, 1, 2, 3]
    warnings = messages(caplog, logging.WARNING)
    assert any("'alive' declared 'ghost' lost" in m for m in warnings), warnings
    assert any("'alive' took over unit 'u0' from 'ghost'" in m for m in warnings), warnings


def test_a_restart_taking_back_its_earlier_incarnations_units_says_so_at_info(
    rig_file: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gradientmail")
    box = rig_file.fresh()
    units = {f"u{i}": i for i in range(4)}
    earlier = Lease(box, "leases/node-0", "node-0", duration=0.3)
    earlier.acquire()  # and never renewed: the process died holding two units
    for unit in ("u1", "u2"):
        UnitClaims(box, RunLayout(0), "node-0", earlier.incarnation).claim(unit)
    with shared_queue(units, mailbox=box, learner_id="node-0", load=lambda u: [u], lease=0.3) as q:
        assert sorted(q) == [0, 1, 2, 3]
    infos = messages(caplog, logging.INFO)
    assert any(
        "'node-0' takes back 2 units its earlier incarnation held (u1, u2)" in m for m in infos
    ), infos


def test_a_run_found_already_complete_says_so_at_info(
    rig_file: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    box = rig_file.fresh()
    units = {f"u{i}": i for i in range(3)}
    with shared_queue(units, mailbox=box, learner_id="a", load=lambda u: [u]) as q:
        assert sorted(q) == [0, 1, 2]
    assert not any("already complete" in m for m in messages(caplog, logging.INFO))
    caplog.set_level(logging.INFO, logger="gradientmail")
    with shared_queue(units, mailbox=box, learner_id="a", load=lambda u: [u]) as q:
        assert list(q) == []
    infos = messages(caplog, logging.INFO)
    assert any("'a' found epoch 0 of the run at" in m and "already complete" in m for m in infos)


class RivalFirst:
    """Lets a rival learner claim and finish the first unit this learner tries to create.

    An interleaving hook: the rival's claim lands between this learner's choice of the
    unit and its ``put_if_absent``, the race two learners on one order run into.
    """

    def __init__(self, inner: Mailbox) -> None:
        self.inner = inner
        self.raced: list[str] = []

    def put_if_absent(self, key: str, data: bytes) -> bool:
        if key.startswith("units/") and not self.raced:
            identifier = key.removeprefix("units/")
            self.raced.append(identifier)
            rival = UnitClaims(self.inner, RunLayout(0), "rival", 1)
            held = rival.claim(identifier)
            assert held is not None
            assert rival.complete(held)
        return self.inner.put_if_absent(key, data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_lost_claims_are_debug(rig_file: Rig, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="gradientmail")
    box = RivalFirst(rig_file.fresh())
    units = {f"u{i:02d}": i for i in range(8)}
    with shared_queue(units, mailbox=box, learner_id="l0", load=lambda u: [u]) as items:  # type: ignore[arg-type]
        got = sorted(items)
    (raced,) = box.raced
    assert got == sorted(v for k, v in units.items() if k != raced)
    lost = [m for m in messages(caplog, logging.DEBUG) if "lost the claim of unit" in m]
    assert lost == [f"'l0' lost the claim of unit {raced!r} to another learner"]
    assert records(caplog, logging.WARNING) == []


class LyingMailbox:
    """Reports a won create but stores another claimant's body: a store that is not atomic."""

    def __init__(self, inner: Mailbox) -> None:
        self.inner = inner

    def put_if_absent(self, key: str, data: bytes) -> bool:
        self.inner.put(key, claim_body("someone-else", "their-token"))
        return True

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_an_atomicity_violation_is_a_warning(
    rig_memory: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="gradientmail")
    box = LyingMailbox(rig_memory.fresh())
    with pytest.raises(AtomicityViolationError):
        claim(box, "units/u0", "node-0")  # type: ignore[arg-type]
    (warning,) = messages(caplog, logging.WARNING)
    assert "atomicity violation" in warning
    assert "'someone-else'" in warning


def test_a_completion_refused_after_a_takeover_is_a_warning(
    rig_file: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="gradientmail")
    box = rig_file.fresh()
    mine = UnitClaims(box, RunLayout(0), "slow", 1)
    held = mine.claim("u0")
    assert held is not None
    other = UnitClaims(box, RunLayout(0), "fast", 1)
    current = other.read("u0")
    assert current is not None
    assert other.take_over("u0", *current) is not None
    assert not mine.complete(held)
    (warning,) = messages(caplog, logging.WARNING)
    assert "'slow' could not record the completion of unit 'u0'" in warning


@pytest.fixture(autouse=True)
def _no_propagation_side_effects() -> Iterator[None]:
    """Tests set levels through caplog only; the package's own handler list is untouched."""
    before = list(logging.getLogger("gradientmail").handlers)
    yield
    assert logging.getLogger("gradientmail").handlers == before
