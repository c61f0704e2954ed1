"""The parts of a :class:`~gradientmail.session.Session` that keep state of their own.

* :class:`UnitLog`: the units a learner reported (claimed, started, finished), guarded by
  its own lock, because the queue's threads report while the publisher reads;
* :class:`Rate`: the smoothed samples-per-second figure, updated once per publication;
* :class:`Lifecycle`: the state the record publishes, and when it began and ended;
* :class:`Found`: what the learner's record held on entering, to resume from or to put back;
* :class:`Publication`: the publisher's period, its last error and what it last wrote.

None does I/O: the session reads and writes the store.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from gradientmail._unit_rows import UnitRow, decode_rows

__all__ = ["RATE_SMOOTHING", "Found", "Lifecycle", "Publication", "Rate", "UnitLog"]

#: Weight of the newest period in the smoothed samples-per-second rate.
RATE_SMOOTHING = 0.5


#: A unit of one epoch: ``(epoch, identifier)``.
UnitKey = tuple[int, str]


@dataclass
class _Entry:
    """What a learner knows of one unit it took (times from ``time.time``)."""

    claimed: float | None = None
    started: float | None = None
    finished: float | None = None
    items: int = 0
    reclaimed: bool = False


class UnitLog:
    """The units a learner reported, by ``(epoch, id)``, published as
    :class:`~gradientmail._unit_rows.UnitRow` rows.

    Every method takes the lock.
    """

    __slots__ = ("_entries", "_lock")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[UnitKey, _Entry] = {}

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def finished(self) -> int:
        """Units with a finish time."""
        with self._lock:
            return self._finished()

    def _finished(self) -> int:
        return sum(1 for entry in self._entries.values() if entry.finished is not None)

    def claimed(self, identifier: UnitKey, reclaimed: bool) -> None:
        """``identifier`` was claimed now (``reclaimed``: taken over from another)."""
        with self._lock:
            self._entries[identifier] = _Entry(claimed=time.time(), reclaimed=reclaimed)

    def released(self, identifier: UnitKey) -> None:
        """``identifier`` went back unfinished: forget it. A unit is released only while no
        completion of it is recorded, so one whose last item the loop took (a DataLoader
        worker's, whose batches torch then dropped) is not finished either."""
        with self._lock:
            self._entries.pop(identifier, None)

    def started(self, identifier: UnitKey) -> None:
        """The unit's first item reached the training loop now."""
        with self._lock:
            self._entry(identifier).started = time.time()

    def done(self, identifier: UnitKey, items: int) -> None:
        """The training loop took the unit's every item (``items`` of them) now."""
        with self._lock:
            entry = self._entry(identifier)
            entry.finished = time.time()
            entry.items = items

    def _entry(self, identifier: UnitKey) -> _Entry:
        return self._entries.setdefault(identifier, _Entry())

    def rows(self) -> tuple[list[UnitRow], int]:
        """The rows to publish, one per unit, and how many are finished."""
        with self._lock:
            rows = [
                UnitRow(ident, entry.claimed, entry.started, entry.finished, entry.reclaimed, epoch)
                for (epoch, ident), entry in self._entries.items()
            ]
            return rows, self._finished()

    def restore(self, rows: object) -> None:
        """Take back the finished units of an earlier record's ``units``; drop the rest."""
        with self._lock:
            for row in decode_rows(rows):
                if row.finished is not None:
                    self._entries[row.epoch, row.identifier] = _Entry(
                        row.claimed, row.started, row.finished, 0, row.reclaimed
                    )


class Rate:
    """Samples per second: over the whole run at first, then smoothed between publications."""

    __slots__ = ("_mark", "_rate")

    def __init__(self) -> None:
        self._rate = 0.0
        self._mark: tuple[float, int] | None = None  # (monotonic, samples) at the last update

    def start(self, samples: int) -> None:
        """Measure from now, at ``samples`` samples."""
        self._mark = (time.monotonic(), samples)

    def update(self, samples: int, started_at: float) -> float:
        """The rate now, at ``samples`` samples; becomes the mark for the next one."""
        now = time.monotonic()
        if self._mark is None:
            elapsed = max(time.time() - started_at, 1e-9)
            rate = samples / elapsed if started_at else 0.0
        else:
            then, before = self._mark
            instant = (samples - before) / max(now - then, 1e-9)
            rate = RATE_SMOOTHING * instant + (1 - RATE_SMOOTHING) * self._rate
        self._rate, self._mark = rate, (now, samples)
        return rate


@dataclass
class Lifecycle:
    """``new`` → ``running`` → ``finished`` or ``failed`` (with the error's type name)."""

    state: str = "new"
    error: str | None = None
    started_at: float = 0.0
    finished_at: float | None = None


@dataclass
class Found:
    """The record at ``learners/{id}`` on entering, whether it could be read at all, and the
    session's counters (steps, samples, units finished, units) once it was resumed."""

    record: bytes | None = None
    read: bool = False
    entered: tuple[int, int, int, int] = (0, 0, 0, 0)


@dataclass
class Publication:
    """Seconds between publications, the last error a periodic one raised (``None`` once one
    succeeds again), and the counters of the last record written, to skip unchanged ones."""

    every: float
    error: BaseException | None = None
    last: tuple[int, int, int, int, str, float] | None = None
