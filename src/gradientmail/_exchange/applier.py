"""The exchange thread's side of one learner: join, apply each delta exactly once, leave.

An :class:`Applier` holds the learner's anchor (the shared version it last adopted), its
ledger sequence and the state of the head it last read. :meth:`Applier.join` runs on the
training thread before the exchange thread starts; from then on only that thread calls it.
It touches the store through :class:`~gradientmail._exchange.store.SharedStore` and the
learner's entry through :class:`~gradientmail._exchange.membership.Membership`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Any, NamedTuple

import torch

from gradientmail._errors import InvalidDataError, LeaseLostError, OutcomeUnknownError
from gradientmail._exchange.layout import Head, start_over
from gradientmail._exchange.membership import Membership
from gradientmail._exchange.reader import VersionReader
from gradientmail._exchange.rules import OuterStep
from gradientmail._exchange.stats import Tally
from gradientmail._exchange.tensors import State

__all__ = ["Applier", "Outcome"]

log = logging.getLogger("gradientmail.exchange")


class Outcome(NamedTuple):
    """What an exchange produced: the shared parameters to adopt and their version; and,
    when a delta was applied or dropped, its staleness (``None``: nothing was exchanged)."""

    shared: State
    version: int
    tau: int | None = None
    applied: bool = False


class Applier:
    """Apply one learner's deltas to a shared model, each exactly once.

    Args:
        membership: this learner's entry in the shared model, and the model's store.
        reader: how the current version is read (its state cached).
        outer: the rule and its staleness damping.
        active_window: seconds after its last exchange a learner stops counting as active.
        layout: the model's layout record (its parameter count among it), created or
            checked on joining.
    """

    def __init__(
        self,
        membership: Membership,
        reader: VersionReader,
        outer: OuterStep,
        *,
        active_window: float,
        layout: dict[str, Any],
    ) -> None:
        self.membership = membership
        self.reader = reader
        self.store = membership.store
        #: The counters of ``Exchange.stats`` (conflicts here).
        self.tally: Tally = membership.tally
        self.outer = outer
        self.active_window = active_window
        self.layout = layout
        self.numel = int(layout["numel"])
        self.seq = 0
        #: The version last adopted (its values without the rule's own state).
        self.anchor = State(torch.empty(0), torch.empty(0, dtype=torch.int64))
        self.anchor_version = -1

    @property
    def learner_id(self) -> str:
        """The learner whose deltas this applies."""
        return self.membership.learner_id

    def join(self, initial: Callable[[], State]) -> tuple[State, int, dict[str, Any]]:
        """Publish ``initial()`` (the rule's own state starts at zero) if no shared version
        exists, else register with the current one; return the state, its version and the
        layout record stored."""
        stored = self.store.ensure_layout(self.layout)
        extra = self.numel * (self.outer.rule.parts - 1)

        def first() -> State:
            values, counts = initial()
            return State(torch.cat([values, torch.zeros(extra)]), counts)

        head, state = self.membership.join(first, self.reader)
        self.seq = head.learners[self.learner_id].seq
        self._anchor_at(head, state)
        return state, head.version, stored

    def leave(self) -> Outcome:
        """Mark this learner gone, with nothing to apply; the anchor stays what to adopt."""
        self.membership.mark_left()
        return Outcome(self.anchor, self.anchor_version)

    def apply(self, snapshot: State, leaving: bool, blocked_s: float) -> Outcome:
        """Apply the progress from the anchor to ``snapshot`` to the current shared version.

        Retries lost swaps; after a lost response, the ledger says whether it landed. The
        learner's entry records ``blocked_s``, the time its training loop was blocked.

        Raises:
            LeaseLostError: a newer process with this learner id replaced this one.
        """
        delta = snapshot.values.detach().to("cpu", torch.float32) - self.anchor.values
        store = self.store
        pending = self.seq + 1
        while True:
            got = self.reader.current()
            if got is None:
                raise store.missing()
            head, expected, current = got
            assert expected is not None  # a versioned read
            entry = head.learners.get(self.learner_id)
            if entry is None:
                raise InvalidDataError(
                    f"the ledger in {store.keys.head} no longer has an entry for learner "
                    f"{self.learner_id!r}, which joined: the head was rewritten by another "
                    f"program. {start_over(store.keys.head)}"
                )
            if not self.membership.registered(head):
                raise LeaseLostError(
                    f"learner {self.learner_id} was replaced in shared model "
                    f"{store.keys.name!r} by a newer process with the same learner id; this "
                    "one applies nothing more",
                    learner=self.learner_id,
                )
            if entry.seq >= pending:  # an earlier attempt landed; its response was lost
                return self._done(head, current, entry.staleness, applied=True)
            tau = head.version - self.anchor_version
            dropped = self.outer.drops(tau)
            if dropped and not leaving:
                log.warning(
                    "%s dropped its progress: %d versions were applied since its anchor "
                    "(max_staleness=%d)",
                    self.learner_id,
                    tau,
                    self.outer.max_staleness,
                )
                return self._done(head, current, tau, applied=False)
            now = store.clock()
            active = len(set(head.active_learners(now, self.active_window)) | {self.learner_id})
            rule = self.outer.rule
            values = current.values
            parts = [values[i * self.numel : (i + 1) * self.numel] for i in range(rule.parts)]
            weight = 0.0 if dropped else self.outer.weight(tau, active)
            new_parts, rule_state = rule.apply(parts, delta * weight, active, head.rule_state)
            # Integer buffers (counts of batches seen) take the largest value any learner had.
            counts = torch.maximum(current.counts, snapshot.counts)
            if self._overtaken(head):
                continue  # another learner swapped meanwhile: its version first, writing nothing
            version = head.version + 1
            token, count, size, state = store.write_state(
                version, State(torch.cat(new_parts), counts)
            )
            head.learners[self.learner_id] = replace(
                entry,
                seq=pending,
                staleness=tau,
                applied_at=now,
                left=leaving,
                blocked_s=blocked_s,
                dropped=entry.dropped + int(dropped),
            )
            history, gone = store.next_history(head, version, token, count)
            new = self.membership.stamped(
                Head(version, token, count, history, head.learners, rule_state),
                fragment_size=size,
            )
            try:
                swapped = store.swap_head(new, expected) is not None
            except OutcomeUnknownError:
                self.tally.unknown_outcome()
                continue  # the next read of the head settles it; the fragments stay for sweep
            if not swapped:
                self.tally.conflict()
                store.delete_data(token, count)
                continue
            store.collect(new, gone)
            return self._done(new, state, tau, applied=not dropped)

    def _overtaken(self, head: Head) -> bool:
        """Whether the head moved on from ``head`` while this learner computed (one small
        GET): a swap would then lose, so the new version's fragments are not written."""
        again = self.store.read_head()
        if again is not None and again[0].token == head.token:
            return False
        self.tally.conflict()
        return True

    def _anchor_at(self, head: Head, state: State) -> None:
        self.reader.remember(head, state)
        self.anchor = State(state.values[: self.numel].clone(), state.counts.clone())
        self.anchor_version = head.version

    def _done(self, head: Head, state: State, tau: int, applied: bool) -> Outcome:
        """Adopt ``head``'s version as the new anchor."""
        self.seq = head.learners[self.learner_id].seq
        self._anchor_at(head, state)
        return Outcome(self.anchor, head.version, tau, applied)
