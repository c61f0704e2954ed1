"""What ``gradientmail status`` reads from a run's mailbox (:class:`RunStatus`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypeGuard

__all__ = ["EpochProgress", "RunStatus", "number"]


def number(value: object) -> TypeGuard[float]:
    """Whether ``value`` is a number in a record (an int or float, not a bool)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass(frozen=True)
class EpochProgress:
    """The run's epochs beside the one a status shows."""

    #: the newest epoch with any key.
    newest: int = 0
    #: whether the epoch shown has any claim or completion (an epoch asked for with
    #: ``--epoch`` may not have started).
    started: bool = True
    #: units done in the epoch shown and in each other epoch that has begun, up to the
    #: newest: epoch -> units done.
    done: dict[int, int] = field(default_factory=dict)


@dataclass
class RunStatus:
    """What a run's mailbox says about it, read at ``now``."""

    now: float
    #: units in the run (from ``manifest``), or ``None`` if no queue wrote one.
    total: int | None
    #: claim keys of the epoch.
    claimed: int
    #: the epoch shown.
    epoch: int = 0
    #: units with a completion record.
    done: int = 0
    #: claimed, not done, not released.
    in_progress: int = 0
    #: units taken over from another learner.
    reclaimed: int = 0
    #: whether the store can take over units (compare-and-swap).
    takeovers: bool = True
    #: progress records merged with leases, sorted by learner id; each has a ``state``,
    #: and its ``units`` (where recorded) as :class:`~gradientmail._unit_rows.UnitRow`.
    learners: list[dict[str, Any]] = field(default_factory=list)
    #: keys that could not be read as records (named in the report, never fatal).
    unreadable: list[str] = field(default_factory=list)
    #: the other epochs: the newest, whether the one shown began, units done in each.
    epochs: EpochProgress = field(default_factory=EpochProgress)

    @property
    def unfinished_epochs(self) -> dict[int, int]:
        """Epochs before the one shown with units left: epoch -> units left."""
        if self.total is None:
            return {}
        return {
            k: self.total - done
            for k, done in sorted(self.epochs.done.items())
            if k < self.epoch and done < self.total
        }

    @property
    def exists(self) -> bool:
        """Whether the mailbox holds a run at all."""
        return self.total is not None or bool(self.learners) or self.claimed > 0

    @property
    def finished(self) -> int:
        """Units done (completion records)."""
        return self.done

    @property
    def free(self) -> int | None:
        """Units nobody holds (``None`` when the total is unknown)."""
        if self.total is None:
            return None
        return max(0, self.total - self.done - self.in_progress)

    @property
    def left(self) -> int | None:
        """Units not done yet (``None`` when the total is unknown)."""
        return None if self.total is None else max(0, self.total - self.done)

    @property
    def complete(self) -> bool:
        """Every unit of the epoch shown is done."""
        return self.total is not None and self.done >= self.total

    @property
    def run_complete(self) -> bool:
        """Every unit of the epoch shown, and of every epoch before it, is done."""
        return self.complete and not self.unfinished_epochs

    @property
    def running(self) -> bool:
        """Whether any learner may still be running: it holds a lease that is renewed, or
        that went silent but is not lost yet."""
        return any(r.get("state") in ("running", "silent") for r in self.learners)

    @property
    def stalled(self) -> bool:
        """Work is left (in the epoch shown or an earlier one), learners were here, and none
        of them is running."""
        started = self.epochs.started
        return started and not self.run_complete and bool(self.learners) and not self.running

    @property
    def failed(self) -> list[dict[str, Any]]:
        """Records of learners that failed."""
        return [r for r in self.learners if r.get("state") == "failed"]

    @property
    def started_at(self) -> float | None:
        """When the first learner started."""
        starts = [float(r["started_at"]) for r in self.learners if number(r.get("started_at"))]
        return min(starts) if starts else None

    def eta(self) -> float | None:
        """Seconds until every unit is done at the rate so far, or ``None`` if unknown."""
        left, start = self.left, self.started_at
        if left is None or start is None:
            return None
        if left == 0:
            return 0.0
        if not self.running or self.done == 0:
            return None
        at_rate = left * (self.now - start) / self.done
        # Units held by a silent learner wait until it is declared lost (or speaks again).
        waits = [float(r["lost_in_s"]) for r in self.learners if number(r.get("lost_in_s"))]
        return max([at_rate, *waits]) if self.in_progress else at_rate
