"""The life of one unit's claim: claimed, taken over, done or released, each exactly once.

A ``shared_queue`` learner changes a unit's claim only through this module:

* :meth:`UnitClaims.claim` creates ``units/{id}`` with ``put_if_absent`` and reads it back
  (exactly one learner wins a free unit);
* :meth:`UnitClaims.take_over` rewrites a claim whose owner died or left, with
  ``put_if_match`` against the version that was read, so exactly one taker wins; the new
  claim lists the former owners in ``previous``;
* :meth:`UnitClaims.complete` moves the claim to ``done`` with ``put_if_match`` against the
  version this learner holds, then creates ``done/{id}``. If another learner took the unit
  over in between, the swap fails and no completion is recorded: a fenced learner can never
  complete a unit it no longer owns, and each unit is completed exactly once;
* :meth:`UnitClaims.release` moves the claim to ``released`` (a learner left early), which
  any other learner may take over at once.

Without compare-and-swap, claims are permanent: completion is the ``done/{id}`` create
alone, nothing is taken over, and a release deletes the claim.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from gradientmail._errors import ForeignRecordError, KeyNotFoundError
from gradientmail._record_codec import encode_record
from gradientmail.backends._options import redact
from gradientmail.mailbox import Capability, Mailbox, Version
from gradientmail.patterns._claims import (
    ClaimRecord,
    claim_versioned,
    create_settled,
    parse_claim,
    previous_owners,
    swap_claim,
)
from gradientmail.patterns._run_layout import RunLayout

__all__ = ["CLAIMED", "DONE", "RELEASED", "Held", "Scan", "UnitClaims"]

#: Lost takeovers and releases at DEBUG; a completion refused because the unit was taken
#: over (this learner's lease lapsed) at WARNING.
_log = logging.getLogger(__name__)

CLAIMED = "claimed"
DONE = "done"
RELEASED = "released"


@dataclass
class Held:
    """A unit this learner holds: the claim version it may swap from."""

    identifier: str
    version: Version | None
    previous: list[str] = field(default_factory=list)

    @property
    def reclaimed(self) -> bool:
        """Whether the unit was taken over from another owner (or an earlier incarnation)."""
        return bool(self.previous)


@dataclass
class Scan:
    """One listing of an epoch's claims and completions."""

    claimed: set[str]
    done: set[str]

    @property
    def open(self) -> set[str]:
        """Claimed but not done: in progress, released, or held by a dead learner."""
        return self.claimed - self.done


class UnitClaims:
    """One learner's operations on the claims of one epoch.

    Args:
        mailbox: the run's mailbox.
        layout: the epoch's keys.
        learner_id: this learner.
        incarnation: this learner's lease incarnation, written into its claims.
    """

    def __init__(
        self, mailbox: Mailbox, layout: RunLayout, learner_id: str, incarnation: int
    ) -> None:
        self.mailbox = mailbox
        self.layout = layout
        self.learner_id = learner_id
        self.incarnation = incarnation
        self.cas = mailbox.supports(Capability.COMPARE_AND_SWAP)

    def _extra(self, state: str, previous: list[str]) -> dict[str, Any]:
        return {"incarnation": self.incarnation, "state": state, "previous": previous}

    def claim(self, identifier: str) -> Held | None:
        """Claim a free unit: one ``put_if_absent`` and one read-back; ``None`` if lost."""
        won = claim_versioned(
            self.mailbox,
            self.layout.units + identifier,
            self.learner_id,
            **self._extra(CLAIMED, []),
        )
        return None if won is None else Held(identifier, won[1])

    def read(self, identifier: str) -> tuple[ClaimRecord, Version] | None:
        """The claim of ``identifier`` and its version; ``None`` if missing.

        Raises:
            ForeignRecordError: the key holds bytes no learner wrote (a claim is written
                whole, so it is never half-readable): skipping it would leave the unit
                unfinished and every learner waiting for it.
        """
        key = self.layout.units + identifier
        try:
            data, version = self.mailbox.get_versioned(key)
        except KeyNotFoundError:
            return None
        record = parse_claim(data)
        if record is None:
            raise ForeignRecordError(
                f"key {key!r} holds bytes that are not a shared_queue claim: the run at "
                f"{redact(self.mailbox.url)} owns the keys under it, and cannot tell what "
                f"this one means; delete the key (box.delete({key!r})) if it is not part of "
                "the run, and keep other data out of the run's keys (units/, done/, "
                "reclaimed/, idle/, epochs/, leases/, learners/, complete and the manifest), "
                "for example by giving the run a prefix of its own in the URL",
                key=key,
            )
        return record, version

    def read_all(self, identifiers: Iterable[str]) -> dict[str, tuple[ClaimRecord, Version]]:
        """:meth:`read` for each identifier (one request each); missing ones are left out."""
        found = {}
        for identifier in identifiers:
            current = self.read(identifier)
            if current is not None:
                found[identifier] = current
        return found

    def take_over(self, identifier: str, record: ClaimRecord, version: Version) -> Held | None:
        """Take a claim whose owner died, left or was an earlier incarnation of this learner.

        Returns the held unit, or ``None`` when another learner changed the claim first.
        """
        previous = [*previous_owners(record), record.owner]
        key = self.layout.units + identifier
        new = swap_claim(
            self.mailbox, key, self.learner_id, version, **self._extra(CLAIMED, previous)
        )
        if new is None:
            _log.debug(
                "%r lost the takeover of unit %r to another learner", self.learner_id, identifier
            )
            return None
        if record.owner != self.learner_id:
            marker = encode_record({"from": record.owner, "by": self.learner_id, "at": time.time()})
            create_settled(self.mailbox, self.layout.reclaimed + identifier, marker)
        return Held(identifier, new, previous)

    def complete(self, held: Held) -> bool:
        """Record that ``held`` is done; ``False`` when it was taken over (nothing recorded)."""
        if self.cas:
            assert held.version is not None
            key = self.layout.units + held.identifier
            extra = self._extra(DONE, held.previous)
            new = swap_claim(self.mailbox, key, self.learner_id, held.version, **extra)
            if new is None:
                _log.warning(
                    "%r could not record the completion of unit %r: another learner took it "
                    "over (this learner's lease lapsed)",
                    self.learner_id,
                    held.identifier,
                )
                return False
            held.version = new
        record = encode_record({"by": self.learner_id, "at": time.time()})
        create_settled(self.mailbox, self.layout.done + held.identifier, record)
        return True

    def finish_done_claim(self, identifier: str) -> None:
        """Create ``done/{id}`` for a claim already in the ``done`` state (its owner died
        between the two writes of :meth:`complete`)."""
        record = encode_record({"by": self.learner_id, "at": time.time(), "repaired": True})
        create_settled(self.mailbox, self.layout.done + identifier, record)

    def release(self, held: Held) -> bool:
        """Give ``held`` back unfinished; ``False`` when it was taken over meanwhile."""
        key = self.layout.units + held.identifier
        if not self.cas:
            self.mailbox.delete(key)
            return True
        assert held.version is not None
        extra = self._extra(RELEASED, held.previous)
        released = swap_claim(self.mailbox, key, self.learner_id, held.version, **extra) is not None
        if not released:
            _log.debug("%r could not release unit %r: taken over", self.learner_id, held.identifier)
        return released

    def scan(self) -> Scan:
        """List the epoch's claims and completions (one paged listing of each)."""
        units, done = self.layout.units, self.layout.done
        claimed = {key[len(units) :] for key in self.mailbox.list(units)}
        finished = {key[len(done) :] for key in self.mailbox.list(done)}
        return Scan(claimed, finished)

    @staticmethod
    def state(record: ClaimRecord) -> str:
        """A claim's state: ``claimed``, ``done`` or ``released``."""
        return str(record.extra.get("state") or CLAIMED)
