"""A learner's line in the shared model's ledger: joining, fencing, leaving.

A learner joins by writing a fresh *incarnation* token into its ledger entry with one swap
of the head; the first learner of a run instead creates the head, naming the initial
parameters it wrote. From then on a swap by that learner id is made only by the process
whose token is in the entry: a restart with the same id writes its own token, which fences
the old process (its next exchange raises ``LeaseLostError``) and keeps the entry's count of
applied exchanges, so the ledger goes on where it stopped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from gradientmail._errors import OutcomeUnknownError
from gradientmail._exchange.layout import Head, LearnerEntry
from gradientmail._exchange.reader import VersionReader
from gradientmail._exchange.stats import Tally
from gradientmail._exchange.store import SharedStore
from gradientmail._exchange.tensors import State
from gradientmail.mailbox import Version

log = logging.getLogger("gradientmail.exchange")


def _names(token: str, head: Head) -> bool:
    return head.token == token


def _left(learner: str, head: Head) -> bool:
    entry = head.learners.get(learner)
    return entry is not None and entry.left


@dataclass
class Membership:
    """One process's membership in a shared model, under ``learner_id``."""

    store: SharedStore
    learner_id: str
    incarnation: str
    #: Where unknown outcomes are counted.
    tally: Tally

    def registered(self, head: Head) -> bool:
        """Whether ``head`` names this process as its learner id's current incarnation."""
        entry = head.learners.get(self.learner_id)
        return entry is not None and entry.incarnation == self.incarnation

    def join(self, initial: Callable[[], State], reader: VersionReader) -> tuple[Head, State]:
        """Create the head from ``initial()``'s state, or register in it; return head and state.

        The current version is read before registering, so a joiner never swaps the head
        over a version it could not read.

        Raises:
            InvalidDataError: the head is missing while versions are stored (deleted), or
                the current version cannot be read (see :class:`VersionReader`).
        """
        store = self.store
        while True:
            got = reader.current()
            if got is None:
                if store.stored_versions() > 0:
                    raise store.missing()
                token, count, size, state = store.write_state(0, initial())
                entry = LearnerEntry(incarnation=self.incarnation, applied_at=store.clock())
                head = self.stamped(
                    Head(0, token, count, [[0, token, count]], {self.learner_id: entry}),
                    fragment_size=size,
                )
                if self.settle(partial(store.create_head, head), partial(_names, token)):
                    return head, state
                store.delete_data(token, count)
                continue
            head, version, state = got
            assert version is not None  # a versioned read
            entry = head.learners.get(self.learner_id) or LearnerEntry()
            head.learners[self.learner_id] = replace(
                entry, incarnation=self.incarnation, left=False, applied_at=store.clock()
            )
            head = self.stamped(head)
            if not self.settle(partial(self._swapped, head, version), self.registered):
                continue
            if entry.incarnation:
                log.info(
                    "%s rejoins shared model %r after %d exchanges; its earlier process is fenced",
                    self.learner_id,
                    store.keys.name,
                    entry.seq,
                )
            return head, state

    def stamped(self, head: Head, **changes: Any) -> Head:
        """``head`` (with ``changes``) as this learner writes it: its id and its clock's time."""
        return replace(head, written_at=self.store.clock(), written_by=self.learner_id, **changes)

    def mark_left(self) -> None:
        """Record in the ledger that this learner left; the version stays as it is."""
        while True:
            got = self.store.read_head()
            if got is None or not self.registered(got[0]):
                return
            head, expected = got
            head.learners[self.learner_id].left = True
            head = self.stamped(head)
            if self.settle(partial(self._swapped, head, expected), partial(_left, self.learner_id)):
                return

    def settle(self, write: Callable[[], bool], landed: Callable[[Head], bool]) -> bool:
        """Run a head write; after an unknown outcome, read the head to tell if it landed."""
        try:
            return write()
        except OutcomeUnknownError:
            self.tally.unknown_outcome()
            got = self.store.read_head()
            return got is not None and landed(got[0])

    def _swapped(self, head: Head, expected: Version) -> bool:
        return self.store.swap_head(head, expected) is not None
