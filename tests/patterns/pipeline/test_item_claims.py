"""``ItemClaims.deliver``: the one write that says a consumer's ``next()`` returned an item.

Direct tests of the swap to ``delivered`` (or ``failed``), of a delivery refused because the
item was taken over, and of the interleaving that the pipeline's takeover relies on: an
owner that delivers between another consumer's read of the claim and its takeover keeps the
item, and the takeover fails. On ``memory://`` and ``file://``: the mechanism is
gradientmail's own, above the Mailbox interface.
"""

from __future__ import annotations

import pytest

from gradientmail import LeaseLostError, Mailbox
from gradientmail.patterns.pipeline._item_claims import ItemClaims
from gradientmail.patterns.pipeline._records import CLAIMED, DELIVERED, FAILED, claim_key
from tests.support.interleave import Interleave


@pytest.fixture
def box(local_box: Mailbox) -> Mailbox:
    return local_box


def test_a_delivery_swaps_the_claim_to_delivered_and_keeps_its_token(box: Mailbox) -> None:
    owner = ItemClaims(box, "c1", 1)
    held = owner.claim("p", 0)
    assert held is not None
    assert held.claim.state == CLAIMED
    owner.deliver(held)
    found = owner.read("p", 0)
    assert found is not None
    claim, _ = found
    assert (claim.state, claim.owner, claim.token) == (DELIVERED, "c1", held.claim.token)
    assert claim.settled
    assert owner.delivered == 1


def test_a_failed_item_is_recorded_failed_and_counts_as_delivered(box: Mailbox) -> None:
    owner = ItemClaims(box, "c1", 1)
    held = owner.claim("p", 3)
    assert held is not None
    owner.deliver(held, failed=True)
    found = owner.read("p", 3)
    assert found is not None
    assert found[0].state == FAILED
    assert found[0].settled
    assert owner.delivered == 1


def test_a_delivery_of_an_item_taken_over_is_refused_naming_the_taker(box: Mailbox) -> None:
    owner, taker = ItemClaims(box, "c1", 1), ItemClaims(box, "c2", 1)
    held = owner.claim("p", 1)
    assert held is not None
    found = taker.read("p", 1)
    assert found is not None
    assert found[1] is not None
    assert taker.take_over("p", 1, found[0], found[1]) is not None  # c1 was declared lost
    with pytest.raises(LeaseLostError, match=r"'c1' lost item p#1 .*'c2'"):
        owner.deliver(held)
    assert owner.delivered == 0
    claim = taker.read("p", 1)
    assert claim is not None
    assert (claim[0].owner, claim[0].state) == ("c2", CLAIMED)


def test_an_owner_that_delivers_between_a_note_and_a_takeover_keeps_the_item(
    box: Mailbox,
) -> None:
    """Another consumer reads the claim (its note of a silent owner), the owner delivers,
    then the other's takeover swaps from the version it read: it must fail, or the item
    would be delivered twice."""
    owner = ItemClaims(box, "c1", 1)
    held = owner.claim("p", 2)
    assert held is not None
    noted = Interleave(box, "get_versioned", claim_key("p", 2), lambda: owner.deliver(held))
    taker = ItemClaims(noted, "c2", 1)
    found = taker.read("p", 2)
    assert noted.ran.is_set(), "the interleaving did not run: the claim key moved?"
    assert found is not None
    assert found[1] is not None
    assert found[0].state == CLAIMED  # read before the owner delivered
    assert taker.take_over("p", 2, found[0], found[1]) is None
    claim = owner.read("p", 2)
    assert claim is not None
    assert (claim[0].owner, claim[0].state) == ("c1", DELIVERED)
    assert (owner.delivered, taker.claimed) == (1, 0)
