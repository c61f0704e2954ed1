"""Writes outside the claims whose outcome the store could not report (``OutcomeUnknownError``)
are settled by reading the key back, so a learner survives a flaky store instead of dying.

The manifest (its digest), the run's identifier list (its bytes), the lease's create, its
takeover and its renewals (the holder's token, incarnation and sequence number): each is
written through a mailbox that loses the response to a write after storing it, or loses the
request before storing it.
"""

from __future__ import annotations

from typing import Any

import pytest

from gradientmail import Mailbox
from gradientmail._errors import OutcomeUnknownError
from gradientmail.patterns._leases import Lease
from gradientmail.patterns.shared_queue import shared_queue
from tests.support.delegating import Delegating

UNITS = {f"u{i}": i for i in range(6)}


@pytest.fixture
def box(local_box: Mailbox) -> Mailbox:
    """``memory://`` and ``file://``: the mechanism is gradientmail's own, above the
    Mailbox interface (see ``tests.support.rigs.local_rig``)."""
    return local_box


class Ambiguous(Delegating):
    """Raises OutcomeUnknownError on the first conditional write to each key under
    ``prefixes``: after storing it (a lost response) or instead of it (a lost request)."""

    def __init__(self, inner: Mailbox, prefixes: tuple[str, ...], *, stored: bool) -> None:
        super().__init__(inner)
        self.prefixes = prefixes
        self.stored = stored
        self.hit: list[str] = []

    def _first(self, key: str) -> bool:
        if key.startswith(self.prefixes) and key not in self.hit:
            self.hit.append(key)
            return True
        return False

    def put_if_absent(self, key: str, data: Any) -> bool:
        if self._first(key):
            if self.stored:
                self.inner.put_if_absent(key, data)
            raise OutcomeUnknownError("response lost (test)", key=key)
        return bool(self.inner.put_if_absent(key, data))

    def put_if_match(self, key: str, data: Any, version: Any) -> Any:
        if self._first(key):
            if self.stored:
                self.inner.put_if_match(key, data, version)
            raise OutcomeUnknownError("response lost (test)", key=key)
        return self.inner.put_if_match(key, data, version)


@pytest.mark.parametrize("stored", [True, False], ids=["response-lost", "request-lost"])
def test_a_queue_survives_ambiguous_manifest_list_and_lease_writes(
    box: Mailbox, stored: bool
) -> None:
    lossy = Ambiguous(box, ("manifest", "leases/"), stored=stored)
    with shared_queue(UNITS, mailbox=lossy, learner_id="a", load=lambda u: [u]) as q:  # type: ignore[arg-type]
        got = sorted(q)
    assert got == sorted(UNITS.values())
    assert {"manifest", "leases/a"} <= set(lossy.hit)
    assert len(list(box.list("done/"))) == len(UNITS)


@pytest.mark.parametrize("stored", [True, False], ids=["response-lost", "request-lost"])
def test_a_lease_renewal_whose_outcome_was_lost_is_settled_by_its_record(
    box: Mailbox, stored: bool
) -> None:
    lease = Lease(box, "leases/n", "n", duration=30)
    lease.acquire()
    lossy = Ambiguous(box, ("leases/",), stored=stored)
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
