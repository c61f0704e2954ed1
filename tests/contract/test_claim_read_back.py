"""A claim is decided by reading it back: a lost response or a lying store never misleads it.

:func:`gradientmail.patterns._claims.claim` creates the claim with ``put_if_absent`` and reads
it back. The read-back decides two cases the create alone cannot:

* the create's response was lost (``OutcomeUnknownError``): our token stored means won,
  another claimant's token means lost, nothing stored means unknown (raised, never guessed);
* the store reported a win but holds another claimant's claim: it is not atomic, and
  ``AtomicityViolationError`` is raised instead of loading the unit twice.

Faults are injected by a wrapper around a real mailbox (every backend), and once through
``BaseMailbox``'s own retry (a create that landed, whose response was dropped).
"""

from __future__ import annotations

import pytest

from gradientmail import (
    AtomicityViolationError,
    LeaseLostError,
    Mailbox,
    OutcomeUnknownError,
    Version,
)
from gradientmail._errors import TransientBackendError
from gradientmail.backends._base import Conflict, RetryPolicy
from gradientmail.backends.memory import MemoryMailbox
from gradientmail.patterns._claims import claim, claim_body, new_token, read_claim
from gradientmail.patterns.pipeline._item_claims import ItemClaims
from gradientmail.patterns.shared_queue import UNITS_PREFIX, shared_queue
from tests.support.delegating import Delegating

KEY = "claims/unit-7"


class LostResponse(Delegating):
    """Sends each create to the store (``send``), then loses its response."""

    def __init__(self, inner: Mailbox, *, send: bool = True) -> None:
        super().__init__(inner)
        self.send = send
        self.creates = 0

    def put_if_absent(self, key: str, data: bytes) -> bool:
        self.creates += 1
        if self.send:
            self.inner.put_if_absent(key, data)
        raise OutcomeUnknownError("the response was lost", key=key, backend=self.inner.url)


class ReportsEveryCreateWon(Delegating):
    """A store that is not atomic: every create is reported won, whatever is stored."""

    def put_if_absent(self, key: str, data: bytes) -> bool:
        self.inner.put_if_absent(key, data)
        return True


def test_a_claim_whose_create_response_was_lost_is_won_when_its_token_is_stored(
    box: Mailbox,
) -> None:
    assert claim(LostResponse(box), KEY, "me")  # type: ignore[arg-type]
    stored = read_claim(box, KEY)
    assert stored is not None
    assert stored.owner == "me"


def test_a_claim_whose_create_response_was_lost_is_lost_when_another_claim_is_stored(
    box: Mailbox,
) -> None:
    assert claim(box, KEY, "other")
    assert not claim(LostResponse(box), KEY, "me")  # type: ignore[arg-type]
    stored = read_claim(box, KEY)
    assert stored is not None
    assert stored.owner == "other"


def test_a_claim_whose_create_response_was_lost_with_nothing_stored_is_unknown(
    box: Mailbox,
) -> None:
    with pytest.raises(OutcomeUnknownError):
        claim(LostResponse(box, send=False), KEY, "me")  # type: ignore[arg-type]
    assert read_claim(box, KEY) is None


def test_a_create_reported_won_over_another_claim_raises_atomicity_violation(
    box: Mailbox,
) -> None:
    assert claim(box, KEY, "other")
    with pytest.raises(AtomicityViolationError, match="a claim by 'other'"):
        claim(ReportsEveryCreateWon(box), KEY, "me")  # type: ignore[arg-type]


def test_a_pipeline_item_claim_on_a_store_that_lets_two_win_raises(box: Mailbox) -> None:
    assert ItemClaims(box, "first", 1).claim("p", 0) is not None
    lying = ItemClaims(ReportsEveryCreateWon(box), "second", 1)  # type: ignore[arg-type]
    with pytest.raises(AtomicityViolationError, match="a claim by 'first'"):
        lying.claim("p", 0)


def test_a_learner_whose_claim_response_was_lost_still_loads_the_unit_once(box: Mailbox) -> None:
    class FirstClaimLost(Delegating):
        """The first unit claim lands, but its response is lost."""

        lost = False

        def put_if_absent(self, key: str, data: bytes) -> bool:
            if key.startswith(UNITS_PREFIX) and not self.lost:
                self.lost = True
                self.inner.put_if_absent(key, data)
                raise OutcomeUnknownError("the response was lost", key=key)
            return bool(self.inner.put_if_absent(key, data))

    loaded: list[str] = []

    def load(unit: str) -> list[str]:
        loaded.append(unit)
        return [unit]

    flaky = FirstClaimLost(box)
    with shared_queue(
        {"a": "a", "b": "b"},
        mailbox=flaky,  # type: ignore[arg-type]
        learner_id="l",
        load=load,
        wait_for_others=False,  # a unit wrongly believed lost would end the run, not hang it
    ) as q:
        assert sorted(q) == ["a", "b"]
    assert flaky.lost
    assert sorted(loaded) == ["a", "b"], "each unit loaded exactly once"


class DropsFirstResponse(MemoryMailbox):
    """memory:// whose first create lands and then loses its response in transport."""

    retry_policy = RetryPolicy(attempts=3, base_delay=0.0, max_delay=0.0)
    dropped = False

    def _create(self, key: str, data: bytes, write_id: str) -> Version | Conflict:
        outcome = super()._create(key, data, write_id)
        if not self.dropped:
            self.dropped = True
            raise TransientBackendError("connection reset after the request was sent", key=key)
        return outcome


def test_a_claim_retried_by_the_backend_after_a_dropped_response_is_won(
    request: pytest.FixtureRequest,
) -> None:
    """BaseMailbox retries; the retry meets our own claim, and reading back says it is ours."""
    box = DropsFirstResponse(f"claim-read-back-{request.node.name}")
    assert claim(box, KEY, "me")
    assert box.dropped
    stored = read_claim(box, KEY)
    assert stored is not None
    assert stored.owner == "me"


class TakenOverBeforeTheReadBack(Delegating):
    """After our create wins, another learner takes the claim over before we read it back.

    This is what a learner paused (SIGSTOP, a long GC pause) between its create and its
    read-back meets: its lease lapsed meanwhile, and a takeover swapped the claim, listing
    it in ``previous``. ``previous`` names who the new claim replaced.
    """

    def __init__(self, inner: Mailbox, previous: list[str]) -> None:
        super().__init__(inner)
        self.previous = previous

    def put_if_absent(self, key: str, data: bytes) -> bool:
        won = self.inner.put_if_absent(key, data)
        assert won, "the key was free"
        _, version = self.inner.get_versioned(key)
        taken = claim_body("taker", new_token(), state="claimed", previous=self.previous)
        assert self.inner.put_if_match(key, taken, version) is not None
        return won


def test_a_claim_taken_over_before_its_read_back_fences_the_claimant(box: Mailbox) -> None:
    """Not an atomicity violation: the store is fine, the claimant stalled past its lease."""
    with pytest.raises(LeaseLostError) as caught:
        claim(TakenOverBeforeTheReadBack(box, ["me"]), KEY, "me")  # type: ignore[arg-type]
    assert caught.value.learner == "me"
    assert "taken over by 'taker'" in str(caught.value)
    stored = read_claim(box, KEY)
    assert stored is not None
    assert stored.owner == "taker", "the takeover stands"


def test_a_claim_replaced_by_one_that_never_listed_the_claimant_is_a_violation(
    box: Mailbox,
) -> None:
    """A replacement that does not name us as a former owner cannot be a takeover of ours."""
    with pytest.raises(AtomicityViolationError):
        claim(TakenOverBeforeTheReadBack(box, ["someone-else"]), KEY, "me")  # type: ignore[arg-type]


def test_a_shared_queue_learner_whose_claim_was_taken_before_its_read_back_is_fenced(
    box: Mailbox,
) -> None:
    """The loader's first claim is taken over under it: next() raises LeaseLostError."""
    steered = TakenOverBeforeTheReadBack(box, ["me"])
    with (
        pytest.raises(LeaseLostError),
        shared_queue({"u0": 0}, mailbox=steered, learner_id="me", load=lambda u: [u]) as items,  # type: ignore[arg-type]
    ):
        list(items)
    stored = read_claim(box, UNITS_PREFIX + "u0")
    assert stored is not None
    assert stored.owner == "taker"
