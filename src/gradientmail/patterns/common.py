"""Pieces shared by the coordination patterns (``shared_queue``, ``pipeline``).

Each pattern uses these instead of its own copy, so a claim, a carried error and a statistic
mean the same thing everywhere:

* :func:`claim`: take ownership of a key with ``put_if_absent``, then read the claim back and
  check that it is ours. A store that let two claimants win raises
  :class:`~gradientmail.errors.AtomicityViolationError` instead of silently double-loading.
* :class:`CarriedError` and :class:`WorkerError`: an exception raised in a background thread
  travels through the pattern's buffer *after* the items produced before it, and the consumer
  re-raises it as a :class:`WorkerError` with the original chained (``__cause__``) and the
  worker's traceback as text (the idea of torch's ``ExceptionWrapper``).
* :class:`Stats` (a dataclass base with :meth:`Stats.snapshot`) and :class:`Latencies`
  (count, total, max and percentiles of a duration).
* :class:`HandoffBuffer`: a bounded FIFO between one background producer thread and a
  consumer, with control entries that do not count against the bound, and a ``close`` that
  wakes a producer waiting for room.

This module's names are a stable API for the patterns: they are added to, never changed.
"""

from __future__ import annotations

import json
import random
import threading
import time
import traceback
from collections import deque
from dataclasses import dataclass, fields, replace
from typing import Any, Generic, TypeVar

from gradientmail.errors import AtomicityViolationError, KeyNotFoundError, WorkerError
from gradientmail.mailbox import Mailbox, new_write_id

__all__ = [
    "CarriedError",
    "ClaimRecord",
    "HandoffBuffer",
    "Latencies",
    "Stats",
    "WorkerError",
    "claim",
    "claim_body",
    "new_token",
    "parse_claim",
    "read_claim",
]

T = TypeVar("T")

# -- claims -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClaimRecord:
    """What a claim key holds: who owns it, a token unique to the claiming call, and when.

    Stored as JSON: ``{"owner": ..., "token": ..., "claimed_at": unix seconds, ...extra}``.
    """

    owner: str
    token: str
    claimed_at: float
    extra: dict[str, Any]


def new_token() -> str:
    """A fresh 128-bit claim token as 32 hex digits (the same generator as write ids)."""
    return new_write_id()


def claim_body(owner: str, token: str, **extra: Any) -> bytes:
    """The bytes :func:`claim` writes: JSON naming ``owner``, ``token`` and the time."""
    body: dict[str, Any] = {"owner": owner, "token": token, "claimed_at": time.time()}
    body.update(extra)
    return json.dumps(body, separators=(",", ":")).encode("utf-8")


def parse_claim(data: bytes) -> ClaimRecord | None:
    """Parse a claim body; ``None`` when the bytes are not a claim written by :func:`claim`."""
    try:
        body = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(body, dict) or not isinstance(body.get("owner"), str):
        return None
    extra = {k: v for k, v in body.items() if k not in ("owner", "token", "claimed_at")}
    claimed_at = body.get("claimed_at")
    return ClaimRecord(
        owner=body["owner"],
        token=str(body.get("token", "")),
        claimed_at=float(claimed_at) if isinstance(claimed_at, (int, float)) else 0.0,
        extra=extra,
    )


def read_claim(mailbox: Mailbox, key: str) -> ClaimRecord | None:
    """The claim stored at ``key``, or ``None`` if the key is missing or holds no claim."""
    try:
        return parse_claim(mailbox.get(key))
    except KeyNotFoundError:
        return None


def claim(mailbox: Mailbox, key: str, owner: str, **extra: Any) -> bool:
    """Take ``key`` for ``owner`` with ``put_if_absent``, then read it back and check.

    Costs one conditional create, plus one read when the create wins. The body records
    ``owner`` and a token unique to this call (so two claimants that share an owner name are
    still told apart), the time, and any JSON-serialisable ``extra`` fields.

    Returns:
        ``True`` when this call owns the key (verified by reading it back), ``False`` when
        another claimant created it first.

    Raises:
        AtomicityViolationError: ``put_if_absent`` reported a win but the key holds another
            claimant's body, or nothing: the store is not atomic, and loading would
            duplicate work. The message names both owners and how to check the store.
        BackendError: the store failed (including ``OutcomeUnknownError``); never turned
            into ``False``.
    """
    token = new_token()
    if not mailbox.put_if_absent(key, claim_body(owner, token, **extra)):
        return False
    stored = read_claim(mailbox, key)
    if stored is None or stored.token != token:
        other = "nothing readable" if stored is None else f"a claim by {stored.owner!r}"
        raise AtomicityViolationError(
            f"claim of {key!r} by {owner!r} was reported as won, but reading it back found "
            f"{other}: the store let two claimants win (or lost the write), so it is not "
            f"safe to coordinate on; check it with: gradientmail conformance {mailbox.url}"
        )
    return True


# -- errors that cross threads ----------------------------------------------------------------


class CarriedError:
    """An exception captured in a worker thread, to be queued after the items before it.

    Create with :meth:`of` inside the ``except`` block (so the traceback is complete), queue
    it, and call :meth:`reraise` in the consumer's thread. The text fields survive being
    written to a mailbox as JSON, for patterns whose workers live in other processes.
    """

    __slots__ = ("message", "original", "traceback_text", "type_name")

    def __init__(
        self,
        type_name: str,
        message: str,
        traceback_text: str,
        original: BaseException | None = None,
    ) -> None:
        self.type_name = type_name
        self.message = message
        self.traceback_text = traceback_text
        self.original = original

    @classmethod
    def of(cls, exc: BaseException) -> CarriedError:
        """Capture ``exc`` with its traceback formatted now, in the worker's thread."""
        kind = type(exc)
        name = kind.__qualname__
        if kind.__module__ not in ("builtins", "__main__"):
            name = f"{kind.__module__}.{name}"
        text = "".join(traceback.format_exception(kind, exc, exc.__traceback__))
        return cls(name, str(exc), text, exc)

    def error(self, worker: str, context: str = "") -> WorkerError:
        """A :class:`WorkerError` for the consumer, with the original chained when present."""
        where = f" {context}" if context else ""
        described = f"{self.type_name}: {self.message}" if self.message else self.type_name
        error = WorkerError(
            f"{worker} failed{where}: {described}",
            worker=worker,
            error_type=self.type_name,
            worker_traceback=self.traceback_text,
        )
        error.__cause__ = self.original
        return error

    def reraise(self, worker: str = "a background worker", context: str = "") -> None:
        """Raise :meth:`error` (``WorkerError`` from the original) in the caller's thread."""
        raise self.error(worker, context)

    def __repr__(self) -> str:
        return f"<CarriedError {self.type_name}: {self.message[:60]!r}>"


# -- statistics -------------------------------------------------------------------------------


_S = TypeVar("_S", bound="Stats")


@dataclass
class Stats:
    """Base for a pattern's counters: a dataclass whose fields all have defaults.

    Counters are written by the thread that owns each of them (a consumer writes its wait
    time, a loader its claims), so reading them from another thread gives a consistent-enough
    view without locks. :meth:`snapshot` copies them for reporting.
    """

    def snapshot(self: _S) -> _S:
        """A copy of the current values (``Latencies`` fields are copied, not shared)."""
        copied = {
            f.name: getattr(self, f.name).copy()
            for f in fields(self)
            if isinstance(getattr(self, f.name), Latencies)
        }
        return replace(self, **copied)

    def as_dict(self) -> dict[str, Any]:
        """The values as plain JSON-friendly data (``Latencies`` as their summary)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            out[f.name] = value.summary() if isinstance(value, Latencies) else value
        return out


class Latencies:
    """A duration's count, total, maximum, and percentiles from a bounded sample.

    ``add`` is cheap (no lock; one writer thread). At most ``keep`` samples are retained,
    chosen by reservoir sampling, so percentiles stay representative over long runs.
    """

    __slots__ = ("_rng", "count", "keep", "max", "samples", "total")

    def __init__(self, keep: int = 4096) -> None:
        self.keep = keep
        self.count = 0
        self.total = 0.0
        self.max = 0.0
        self.samples: list[float] = []
        self._rng = random.Random(0)

    def add(self, seconds: float) -> None:
        """Record one duration in seconds."""
        self.count += 1
        self.total += seconds
        if seconds > self.max:
            self.max = seconds
        if len(self.samples) < self.keep:
            self.samples.append(seconds)
        else:
            slot = self._rng.randrange(self.count)
            if slot < self.keep:
                self.samples[slot] = seconds

    @property
    def mean(self) -> float:
        """Mean seconds (0.0 when empty)."""
        return self.total / self.count if self.count else 0.0

    def percentile(self, q: float) -> float:
        """The ``q``-th percentile (0-100) of the retained samples, 0.0 when empty."""
        if not self.samples:
            return 0.0
        ordered = sorted(self.samples)
        index = min(len(ordered) - 1, max(0, round(q / 100.0 * (len(ordered) - 1))))
        return ordered[index]

    def copy(self) -> Latencies:
        """An independent copy."""
        other = Latencies(self.keep)
        other.count, other.total, other.max = self.count, self.total, self.max
        other.samples = list(self.samples)
        return other

    def summary(self) -> dict[str, float]:
        """``count``, ``mean``, ``p50``, ``p99`` and ``max`` (seconds)."""
        return {
            "count": self.count,
            "mean": self.mean,
            "p50": self.percentile(50),
            "p99": self.percentile(99),
            "max": self.max,
        }

    def __repr__(self) -> str:
        return f"Latencies(count={self.count}, mean={self.mean:.6f}s, max={self.max:.6f}s)"


# -- the handoff buffer -----------------------------------------------------------------------


class HandoffBuffer(Generic[T]):
    """A bounded FIFO from one producer thread to one consumer, that can be closed.

    * :meth:`put` waits while ``capacity`` counted entries are buffered; it returns ``False``
      (dropping the entry) once :meth:`close` has been called, and never blocks after that.
    * :meth:`wait_for_room` waits until a put would not block, so a producer can avoid even
      *making* the next entry while the buffer is full.
    * :meth:`put_control` appends an entry that does not count against ``capacity`` (an end
      marker, a carried error), so it never waits behind the bound.
    * :meth:`get` returns entries in the order they were put; it blocks while the buffer is
      empty and returns ``(entry, seconds_waited)``.
    """

    __slots__ = ("_closed", "_counted", "_entries", "_lock", "_not_empty", "_not_full", "capacity")

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, not {capacity}")
        self.capacity = capacity
        self._entries: deque[tuple[T | object, bool]] = deque()
        self._counted = 0
        self._closed = False
        self._lock = threading.Lock()
        self._not_empty = threading.Condition(self._lock)
        self._not_full = threading.Condition(self._lock)

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def __len__(self) -> int:
        """Counted entries buffered now."""
        return self._counted

    def wait_for_room(self) -> bool:
        """Block until a counted entry fits; ``False`` if the buffer is (or gets) closed."""
        with self._lock:
            while self._counted >= self.capacity and not self._closed:
                self._not_full.wait()
            return not self._closed

    def put(self, entry: T) -> bool:
        """Append a counted entry, waiting for room; ``False`` (not added) once closed."""
        with self._lock:
            while self._counted >= self.capacity and not self._closed:
                self._not_full.wait()
            if self._closed:
                return False
            self._entries.append((entry, True))
            self._counted += 1
            self._not_empty.notify()
            return True

    def put_control(self, entry: object) -> bool:
        """Append an entry that does not count against capacity; ``False`` once closed."""
        with self._lock:
            if self._closed:
                return False
            self._entries.append((entry, False))
            self._not_empty.notify()
            return True

    def get(self) -> tuple[T | object, float]:
        """Remove and return the oldest entry and the seconds spent waiting for it."""
        with self._lock:
            waited = 0.0
            if not self._entries:
                start = time.perf_counter()
                while not self._entries:
                    self._not_empty.wait()
                waited = time.perf_counter() - start
            entry, counted = self._entries.popleft()
            if counted:
                self._counted -= 1
                self._not_full.notify()
            return entry, waited

    def close(self) -> None:
        """Stop accepting entries and wake a producer waiting for room. Idempotent."""
        with self._lock:
            self._closed = True
            self._not_full.notify_all()
            self._not_empty.notify_all()
