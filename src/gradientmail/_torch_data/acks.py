"""Which batches a DataLoader's training loop took: shared memory between the loop and its workers.

torch's DataLoader drops the batches still in its worker queues when a loop leaves early.
A worker alone cannot tell those from the batches the loop took, so it must not record a
unit done when its generator passes the unit's last item. Instead:

* each worker counts the items its generator handed to the DataLoader (:class:`WorkerGate`),
  and every batch it collates carries that count (:class:`Tagging`, :class:`Tagged`);
* the training process, when the loop asks for the batch after one, writes that batch's
  count for its worker on the :class:`AckBoard`: every item up to it is the loop's now;
* the worker's completion recorder writes a unit done only once the board's count for it
  reaches the unit's last item (the queue's ``CompletionGate``). When the loop leaves
  early, the board's generation moves on, and the units still waiting are released.

Each board value packs the iteration's generation with the count, so a worker never reads
a count of another iteration as its own.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import threading
import time
from collections.abc import Callable
from multiprocessing import RawArray
from typing import Any, NamedTuple

from torch.utils.data import get_worker_info

__all__ = ["AckBoard", "Tagged", "Tagging", "WorkerGate", "current_gate"]

_log = logging.getLogger("gradientmail.torch")

#: Bits of a board value that hold the item count; the generation sits above them.
_SHIFT = 40
_COUNT = (1 << _SHIFT) - 1
#: Bytes of a worker's last error message kept on the board.
_MESSAGE = 480
#: The longest pause between two looks at the board.
_POLL_S = 0.05
#: After this long, a training process waiting for its workers says so.
_PATIENCE_S = 5.0


class AckBoard:
    """Shared memory between a ``SharedQueueLoader`` and its worker processes.

    Per worker: the items the training loop took (with the iteration's generation), the
    generation whose queue the worker is closing, and the one it closed (negative: it
    failed, with the message kept here), and its process id. Travels to workers by fork or
    by spawn pickling.

    Args:
        workers: the DataLoader's ``num_workers``.
        slack: the most units of one worker whose items may be on their way to the loop
            (the worker's loader may hold that many more units).
    """

    def __init__(self, workers: int, slack: int) -> None:
        self.workers = workers
        self.slack = slack
        self._taken: Any = RawArray("q", workers)
        self._closing: Any = RawArray("q", workers)
        self._closed: Any = RawArray("q", workers)
        self._messages: Any = RawArray("c", workers * _MESSAGE)
        self._pids: Any = RawArray("q", workers)
        #: The last generation after which the loop takes nothing more.
        self._sealed: Any = RawArray("q", 1)
        self._generation = 0  # the training process's own counter

    # -- the training process -----------------------------------------------------------------

    def begin(self) -> int:
        """A new iteration: every worker's count restarts at 0 under a new generation. Gates
        of the iterations before it open no more."""
        self._generation += 1
        for worker in range(self.workers):
            self._taken[worker] = self._generation << _SHIFT
        return self._generation

    def took(self, worker: int, count: int, generation: int) -> None:
        """The loop took every item ``worker`` handed over, up to ``count``."""
        self._taken[worker] = (generation << _SHIFT) | count

    def seal(self, generation: int) -> None:
        """The loop takes nothing more of ``generation``: a gate still waiting gives up."""
        self._sealed[0] = generation

    def settle(self, generation: int, alive: Callable[[int], bool]) -> list[str]:
        """Seal ``generation``, then wait until every worker closing its queue has closed it
        (or died); the failures, as messages. Call it once the loop took every batch it
        will take."""
        self.seal(generation)
        began = time.monotonic()
        said = False
        failures = []
        for worker in range(self.workers):
            delay = 0.001
            while self._closing[worker] == generation and abs(self._closed[worker]) != generation:
                if not alive(worker):
                    failures.append(
                        f"DataLoader worker {worker} died before it recorded the completions "
                        "of its last units; they stay in progress until it restarts"
                    )
                    break
                if not said and time.monotonic() - began > _PATIENCE_S:
                    _log.info("waiting for DataLoader worker %d to record its last units", worker)
                    said = True
                time.sleep(delay)
                delay = min(delay * 2, _POLL_S)
            if self._closed[worker] == -generation:
                failures.append(self._message(worker))
        return failures

    def alive(self, worker: int) -> bool:
        """Whether ``worker``'s process is alive (one that has not begun an iteration yet
        counts as alive): a child of this process, so its exit is seen here."""
        pid = int(self._pids[worker])
        return pid == 0 or any(child.pid == pid for child in multiprocessing.active_children())

    # -- a worker -----------------------------------------------------------------------------

    def generation(self, worker: int) -> int:
        """The iteration this worker's new queue belongs to."""
        return int(self._taken[worker]) >> _SHIFT

    def taken(self, worker: int, generation: int) -> int | None:
        """Items of ``worker`` the loop took in ``generation``; ``None``: it moved on."""
        value = int(self._taken[worker])
        if value >> _SHIFT != generation:
            return None
        return value & _COUNT

    def sealed(self, generation: int) -> bool:
        """Whether the loop takes nothing more of ``generation``."""
        return int(self._sealed[0]) >= generation

    def closing(self, worker: int, generation: int) -> None:
        self._closing[worker] = generation

    def closed(self, worker: int, generation: int, error: str | None) -> None:
        if error is not None:
            raw = error.encode("utf-8", "replace")[: _MESSAGE - 1]
            start = worker * _MESSAGE
            self._messages[start : start + _MESSAGE] = raw.ljust(_MESSAGE, b"\0")
        self._closed[worker] = generation if error is None else -generation

    def _message(self, worker: int) -> str:
        start = worker * _MESSAGE
        raw = bytes(self._messages[start : start + _MESSAGE])
        return raw.split(b"\0", 1)[0].decode("utf-8", "replace")


class WorkerGate:
    """One worker's gate for one iteration: its count of items handed over, and the wait.

    Implements the queue's ``CompletionGate``, which the worker's queue is built with:
    :meth:`mark` is the count when a unit's last item was handed over; :meth:`wait` returns
    ``True`` once the loop took that many items, ``False`` once it never will (a new
    iteration began, or this one was abandoned); :attr:`slack` is the board's.
    """

    def __init__(self, board: AckBoard, worker: int) -> None:
        self.board = board
        self.worker = worker
        #: The most units of this worker whose items may be on their way to the loop.
        self.slack = board.slack
        board._pids[worker] = os.getpid()  # for the loop's board.alive(worker)
        self.generation = board.generation(worker)
        #: Items this worker's generator handed to the DataLoader in this iteration.
        self.count = 0
        self._abandoned = threading.Event()

    def mark(self) -> int:
        return self.count

    def wait(self, mark: int) -> bool:
        delay = 0.001
        while True:
            taken = self.board.taken(self.worker, self.generation)
            if taken is None:
                return False
            if taken >= mark:
                return True
            if self.board.sealed(self.generation):
                # Sealed after its last take: read the count once more, it may have come
                # with the seal.
                taken = self.board.taken(self.worker, self.generation)
                return taken is not None and taken >= mark
            if self._abandoned.wait(delay):
                return False
            delay = min(delay * 2, _POLL_S)

    def abandon(self) -> None:
        """The iteration ended early here: the items not taken yet never will be."""
        self._abandoned.set()


#: This worker process's gate of the iteration running now (its collate reads the count).
_current: list[WorkerGate] = []


def current_gate(gate: WorkerGate | None = None) -> WorkerGate | None:
    """Set (with ``gate``) or read this process's running gate."""
    if gate is not None:
        _current[:] = [gate]
    return _current[0] if _current else None


class Tagged(NamedTuple):
    """A batch, with who collated it and how many items that worker had handed over then.

    A named tuple, so that torch's ``pin_memory`` keeps it (it rebuilds named tuples)."""

    batch: Any
    worker: int
    handed: int


class Tagging:
    """A DataLoader ``collate_fn`` that tags each batch it collates in a worker.

    Args:
        collate: the collate function to run first (the DataLoader's own or the user's).
    """

    def __init__(self, collate: Callable[[Any], Any]) -> None:
        self.collate = collate

    def __call__(self, samples: Any) -> Tagged:
        batch = self.collate(samples)
        gate = current_gate()
        info = get_worker_info()
        if gate is None or info is None:  # not in a SharedQueueLoader's worker: never here
            raise RuntimeError("gradientmail's batch tagging ran outside a loader worker")
        return Tagged(batch, info.id, gate.count)
