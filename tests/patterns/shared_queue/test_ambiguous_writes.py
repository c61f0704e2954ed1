"""Writes whose outcome the store could not report (``OutcomeUnknownError``) are settled by
reading the key back, so a learner survives a flaky store instead of dying.

The manifest (its digest), the run's identifier list (its bytes), the lease's create, its
takeover and its renewals (the holder's token, incarnation and sequence number), a claim's
swaps to done, to released and to a new owner (the new claim's token), and the records whose
presence is what counts (``done/``, ``reclaimed/``, idle markers): each is written through a
mailbox that loses the response to a write after storing it, or loses the request before
storing it. ``local_box`` (memory and file) suffices: the settling is gradientmail's own,
above the Mailbox interface.
"""

from __future__ import annotations

from typing import Any

import pytest

from gradientmail import Mailbox
from gradientmail._errors import OutcomeUnknownError, WorkerError
from gradientmail.patterns._claims import claim_body, create_settled, parse_claim, swap_claim
from gradientmail.patterns._leases import Lease, LeaseWatcher
from gradientmail.patterns._run_layout import LEASES_PREFIX, RunLayout
from gradientmail.patterns.shared_queue import shared_queue
from gradientmail.patterns.shared_queue._idle_markers import IdleWatch
from gradientmail.patterns.shared_queue._unit_claims import CLAIMED, DONE, RELEASED, UnitClaims
from tests.support.ambiguous import Ambiguous
from tests.support.delegating import Delegating

UNITS = {f"u{i}": i for i in range(6)}


@pytest.mark.parametrize("stored", [True, False], ids=["response-lost", "request-lost"])
def test_a_queue_survives_ambiguous_manifest_list_and_lease_writes(
    local_box: Mailbox, stored: bool
) -> None:
    lossy = Ambiguous(local_box, ("manifest", "leases/"), stored=stored)
    with shared_queue(UNITS, mailbox=lossy, learner_id="a", load=lambda u: [u]) as q:  # type: ignore[arg-type]
        got = sorted(q)
    assert got == sorted(UNITS.values())
    assert {"manifest", "leases/a"} <= set(lossy.hit)
    assert len(list(local_box.list("done/"))) == len(UNITS)


@pytest.mark.parametrize("stored", [True, False], ids=["response-lost", "request-lost"])
def test_a_lease_renewal_whose_outcome_was_lost_is_settled_by_its_record(
    local_box: Mailbox, stored: bool
) -> None:
    lease = Lease(local_box, "leases/n", "n", duration=30)
    lease.acquire()
    lossy = Ambiguous(local_box, ("leases/",), stored=stored)
    lease.mailbox = lossy  # type: ignore[assignment]
    if stored:
        lease.renew()  # landed: adopted, not an error
    else:
        with pytest.raises(OutcomeUnknownError):
            lease.renew()  # did not land: the lease is as it was
    lease.renew()  # the next renewal swaps from the right version either way
    lease.ensure_fresh()
    assert not lease.lost
    lease.end()


@pytest.mark.parametrize("stored", [True, False], ids=["response-lost", "request-lost"])
def test_ambiguous_claim_swaps_and_completion_records_are_settled(
    local_box: Mailbox, stored: bool
) -> None:
    # Every unit's claim swap to done, and its done/ record, is ambiguous once.
    lossy = Ambiguous(local_box, ("units/", "done/"), stored=stored)
    with shared_queue(UNITS, mailbox=lossy, learner_id="a", load=lambda u: [u]) as q:  # type: ignore[arg-type]
        assert sorted(q) == sorted(UNITS.values())
    assert {("swap", f"units/{u}") for u in UNITS} <= lossy.kinds
    assert {("create", f"done/{u}") for u in UNITS} <= lossy.kinds
    assert sorted(local_box.list("done/")) == sorted(f"done/{u}" for u in UNITS)
    for unit in UNITS:
        record = parse_claim(local_box.get(f"units/{unit}"))
        assert record is not None
        assert record.extra["state"] == DONE


@pytest.mark.parametrize("stored", [True, False], ids=["response-lost", "request-lost"])
def test_ambiguous_releases_and_takeovers_are_settled(local_box: Mailbox, stored: bool) -> None:
    # "a" leaves early, releasing what it holds (a swap each); "b" takes the released units
    # over (a swap and a reclaimed/ marker each); every one of those writes is ambiguous once.
    lossy = Ambiguous(local_box, ("units/", "reclaimed/"), stored=stored)
    with shared_queue(UNITS, mailbox=lossy, learner_id="a", load=lambda u: [u], prefetch=4) as q:  # type: ignore[arg-type]
        first = next(q)
    claims = {key: parse_claim(local_box.get(key)) for key in local_box.list("units/")}
    released = [k[len("units/") :] for k, c in claims.items() if c and c.extra["state"] == RELEASED]
    assert released, "leaving early released the units held"
    with shared_queue(UNITS, mailbox=lossy, learner_id="b", load=lambda u: [u]) as q:  # type: ignore[arg-type]
        rest = sorted(q)
    # A unit left unfinished is released and trained again, from its first item.
    assert {first, *rest} == set(UNITS.values())
    assert {UNITS[u] for u in released} <= set(rest)
    assert {("swap", f"units/{u}") for u in released} <= lossy.kinds
    assert {("create", f"reclaimed/{u}") for u in released} <= lossy.kinds
    assert sorted(local_box.list("reclaimed/")) == sorted(f"reclaimed/{u}" for u in released)
    assert len(list(local_box.list("done/"))) == len(UNITS)


@pytest.mark.parametrize("stored", [True, False], ids=["response-lost", "request-lost"])
def test_an_ambiguous_idle_marker_is_settled(local_box: Mailbox, stored: bool) -> None:
    lossy = Ambiguous(local_box, ("idle/",), stored=stored)
    claims = UnitClaims(lossy, RunLayout(0), "a", 1)  # type: ignore[arg-type]
    watch = IdleWatch(claims, LeaseWatcher(local_box, LEASES_PREFIX, duration=60.0), 20.0)
    watch.mark()
    assert lossy.kinds == {("create", "idle/a")}
    assert list(local_box.list("idle/")) == ["idle/a"]


def test_a_claim_swap_still_ambiguous_after_every_try_raises(local_box: Mailbox) -> None:
    class NeverSays(Delegating):
        def put_if_match(self, key: str, data: Any, version: Any) -> Any:
            raise OutcomeUnknownError("response lost (test)", key=key)

    local_box.put_if_absent("units/u0", claim_body("a", "t0", state=CLAIMED))
    _, version = local_box.get_versioned("units/u0")
    with pytest.raises(OutcomeUnknownError):
        swap_claim(NeverSays(local_box), "units/u0", "a", version, state=DONE)  # type: ignore[arg-type]
    assert parse_claim(local_box.get("units/u0")).extra["state"] == CLAIMED  # type: ignore[union-attr]


def test_an_ambiguous_create_that_finds_another_record_is_not_ours(local_box: Mailbox) -> None:
    local_box.put_if_absent("pipeline", b"another run's manifest")
    lossy = Ambiguous(local_box, ("pipeline",), stored=True)
    mine = b"this run's manifest"
    assert not create_settled(lossy, "pipeline", mine, lambda stored: stored == mine)  # type: ignore[arg-type]
    again = Ambiguous(local_box, ("pipeline",), stored=True)
    assert create_settled(again, "pipeline", mine)  # type: ignore[arg-type]  # presence counts
    assert local_box.get("pipeline") == b"another run's manifest"


@pytest.mark.timeout(20)  # the failure this guards against was a hang
def test_any_error_recording_a_completion_reaches_the_loop(local_box: Mailbox) -> None:
    class BrokenCompletions(Delegating):
        def put_if_absent(self, key: str, data: Any) -> bool:
            if key.startswith("done/"):
                raise RuntimeError("a bug in a plug-in backend (test)")
            return bool(self.inner.put_if_absent(key, data))

    broken = BrokenCompletions(local_box)
    with (
        pytest.raises(WorkerError, match="while recording the completion of unit 'u"),
        shared_queue(UNITS, mailbox=broken, learner_id="a", load=lambda u: [u], prefetch=1) as q,  # type: ignore[arg-type]
    ):
        for _ in q:
            pass
