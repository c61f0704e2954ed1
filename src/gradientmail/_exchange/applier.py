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
from gradientmail._exchange.liveness import Liveness, expected_versions
from gradientmail._exchange.membership import Membership
from gradientmail._exchange.noise import noise_gain, noise_scale
from gradientmail._exchange.pace import GroupPace, LearnerPace, Progress
from gradientmail._exchange.reader import VersionReader
from gradientmail._exchange.rules import OuterStep
from gradientmail._exchange.stats import Tally
from gradientmail._exchange.store import Superseded
from gradientmail._exchange.tensors import State, difference

__all__ = ["Applier", "Outcome"]

log = logging.getLogger("gradientmail.exchange")


class Outcome(NamedTuple):
    """What an exchange produced: the shared parameters to adopt and their version; and,
    when a delta was applied or dropped, its staleness (``None``: nothing was exchanged),
    and the other active learners' paces as the head recorded them."""

    shared: State
    version: int
    tau: int | None = None
    applied: bool = False
    paces: dict[str, LearnerPace] | None = None
    #: What adopting it adds to the model handed over (``shared - snapshot``, on the
    #: snapshot's device), made on the exchange thread: adopting is one in-place addition.
    correction: State | None = None


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
        #: Which others still exchange: a learner killed without leaving drops out of the
        #: group's batch long before ``active_window`` ends.
        self.liveness = Liveness()
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

    def apply(
        self, snapshot: State, leaving: bool, blocked_s: float, progress: Progress
    ) -> Outcome:
        """Apply the progress from the anchor to ``snapshot`` to the current shared version.

        Retries lost swaps; after a lost response, the ledger says whether it landed. The
        delta's weight follows ``progress`` against the other active learners' paces in the
        head (:class:`~gradientmail._exchange.rules.OuterStep`), times its noise gain
        (``gradientmail._exchange.noise``). The learner's entry records
        ``blocked_s``, the time its training loop was blocked, and its pace.

        Raises:
            LeaseLostError: a newer process with this learner id replaced this one.
        """
        delta = difference(snapshot.values.detach().to("cpu", torch.float32), self.anchor.values)
        pace = progress.published()
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
            others = self._paces(head, now)
            group = GroupPace(others, self.learner_id, pace)
            active = len(others) + 1
            rule = self.outer.rule
            values = current.values
            parts = [values[i * self.numel : (i + 1) * self.numel] for i in range(rule.parts)]
            per_step, fit = progress.samples_per_step, group.noise()
            gain = noise_gain(fit, per_step, group.group_batch())
            share = group.share(per_step) * gain
            normal = group.expected_staleness()
            weight = 0.0 if dropped else self.outer.weight(tau, active, share, normal)
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
                pace=pace,
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
            self.tally.weighed(gain, noise_scale(fit))
            return self._done(new, state, tau, applied=not dropped)._replace(paces=others)

    def refresh(self, than: int) -> tuple[State, int] | None:
        """The current shared state and version if the head moved past version ``than``,
        else ``None`` (also when that version was collected while read): for adopting a
        newer version than an exchange produced. Reads the head, and the version's
        fragments when it moved; changes nothing but the reader's cache.

        Raises:
            InvalidDataError: a damaged record (see :meth:`SharedStore.read_state`).
        """
        got = self.store.read_head()
        if got is None or got[0].version <= than:
            return None
        try:
            state = self.reader.state_of(got[0])
        except Superseded:
            return None
        return State(state.values[: self.numel], state.counts), got[0].version

    def adopted(self, shared: State, version: int) -> None:
        """The learner adopts ``version`` (from :meth:`refresh`) instead: the new anchor."""
        self.anchor = State(shared.values.clone(), shared.counts.clone())
        self.anchor_version = version

    def _paces(self, head: Head, now: float) -> dict[str, LearnerPace]:
        """The other active learners' paces, as ``head`` records them: those that exchanged
        within ``active_window`` and still do (:class:`Liveness`)."""
        active = {
            name: head.learners[name] for name in head.active_learners(now, self.active_window)
        }
        expected = expected_versions(active)
        return {
            name: entry.pace
            for name, entry in active.items()
            if name != self.learner_id
            and self.liveness.live(name, entry, head.version, expected[name])
        }

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
