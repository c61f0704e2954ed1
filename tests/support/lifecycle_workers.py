"""Learner processes for the lifecycle tests: they log every item they deliver.

Each line of a learner's log is ``<unit> <item> <wall time>``; a learner whose lease was
lost writes ``LEASE_LOST <units>`` and exits with status 3. Logs are flushed per line, so a
SIGKILL loses at most the line being written.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from typing import Any

from gradientmail import LeaseLostError, Mailbox
from gradientmail.patterns.shared_queue import shared_queue

ITEMS_PER_UNIT = 2


def units_of(count: int) -> dict[str, int]:
    """The mapping every learner of a test run passes."""
    return {f"u{i:03d}": i for i in range(count)}


def learner(
    box: Mailbox, learner_id: str, count: int, log: str, lease: float, item_s: float
) -> None:
    """Run one learner over ``count`` units, logging each delivered item to ``log``."""

    def load(unit: int) -> Iterator[int]:
        for k in range(ITEMS_PER_UNIT):
            time.sleep(item_s)  # the unit's simulated cost, not synchronisation
            yield k

    units = units_of(count)
    names = {value: name for name, value in units.items()}
    with open(log, "a", buffering=1) as out:
        try:
            with shared_queue(
                units,
                mailbox=box,
                learner_id=learner_id,
                load=_Tagged(load),
                prefetch=2,
                lease=lease,
            ) as queue:
                for unit, item in queue:
                    out.write(f"{names[unit]} {item} {time.time():.6f}\n")
        except LeaseLostError as exc:
            out.write(f"LEASE_LOST {' '.join(exc.units)}\n")
            out.flush()
            os._exit(3)
    sys.exit(0)


class _Tagged:
    """``load`` that yields ``(unit, item)`` pairs (picklable for spawn)."""

    def __init__(self, load: Any) -> None:
        self.load = load

    def __call__(self, unit: int) -> Iterator[tuple[int, int]]:
        for item in self.load(unit):
            yield unit, item


def read_log(path: str) -> list[tuple[str, int, float]]:
    """The items a learner delivered, in order (a torn last line is ignored)."""
    if not os.path.exists(path):
        return []
    entries = []
    with open(path) as log:
        for line in log:
            parts = line.split()
            if len(parts) == 3 and parts[0] != "LEASE_LOST":
                entries.append((parts[0], int(parts[1]), float(parts[2])))
    return entries


def flowing_learner(
    box: Mailbox,
    learner_id: str,
    count: int,
    log: str,
    epochs: int,
    lease: float,
    item_s: float,
    hold: str = "",
) -> None:
    """A learner over ``epochs`` flowing epochs; each line of ``log`` is
    ``<epoch> <unit> <item> <wall time>``. With ``hold``, its first unit creates that file
    and then never ends (the unit is in progress when the test kills the process)."""
    held = [bool(hold)]

    def load(unit: int) -> Iterator[int]:
        if held[0]:
            held[0] = False
            # Written whole, then renamed: a test that sees the file reads the unit, never
            # the empty file between its creation and the write.
            with open(hold + ".part", "w") as marker:
                marker.write(str(unit))
            os.replace(hold + ".part", hold)
            time.sleep(600)  # a unit in progress until the test kills this process
        for k in range(ITEMS_PER_UNIT):
            time.sleep(item_s)  # the unit's simulated cost, not synchronisation
            yield k

    units = units_of(count)
    names = {value: name for name, value in units.items()}
    with (
        open(log, "a", buffering=1) as out,
        shared_queue(
            units,
            mailbox=box,
            learner_id=learner_id,
            load=_Tagged(load),
            prefetch=2,
            lease=lease,
            epochs=range(epochs),
        ) as queue,
    ):
        for unit, item in queue:
            out.write(f"{queue.epoch} {names[unit]} {item} {time.time():.6f}\n")
    sys.exit(0)


def read_flowing_log(path: str) -> list[tuple[int, str, int]]:
    """The ``(epoch, unit, item)`` a flowing learner delivered, in order."""
    if not os.path.exists(path):
        return []
    entries = []
    with open(path) as log:
        for line in log:
            parts = line.split()
            if len(parts) == 4:
                entries.append((int(parts[0]), parts[1], int(parts[2])))
    return entries
