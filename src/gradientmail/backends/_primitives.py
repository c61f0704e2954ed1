"""The small pieces every backend's primitives speak: conflicts, stats, retries, write ids.

:class:`~gradientmail.backends._base.BaseMailbox` re-exports each of them.
"""

from __future__ import annotations

import enum
import os
import random
from dataclasses import dataclass

from gradientmail._errors import InvalidDataError
from gradientmail.mailbox import Version

__all__ = ["Conflict", "RetryPolicy", "Stat", "as_bytes", "new_write_id"]


class Conflict(enum.Enum):
    """How a backend's conditional primitive reports that the precondition failed."""

    #: The precondition failed on the only request sent: our write was certainly not stored.
    LOST = "lost"
    #: The precondition failed after the request was retried (by the SDK or the transport):
    #: the earlier attempt may have stored our write, so the key must be read back.
    AFTER_RETRY = "after-retry"


@dataclass(frozen=True)
class Stat:
    """What a backend knows about a stored key without reading its value."""

    version: Version
    #: The write id stamped by the write that stored the current value, if the store kept it.
    write_id: str | None


@dataclass(frozen=True)
class RetryPolicy:
    """Jittered exponential backoff for transient failures, shared by every backend.

    Attempt ``n`` (0-based) waits a uniformly random time in ``[0, min(cap, base * 2**n)]``
    before the next attempt ("full jitter"), so racing clients spread out.
    """

    attempts: int = 5
    base_delay: float = 0.05
    max_delay: float = 2.0

    def delay(self, attempt: int) -> float:
        """The pause before retry number ``attempt + 1``."""
        return random.uniform(0.0, min(self.max_delay, self.base_delay * (2**attempt)))


# Write ids only need to be unique, not secret. A PRNG seeded with 256 bits from the OS makes
# them without a syscall: os.urandom (behind uuid4) releases the GIL, which on a busy consumer
# thread can stall a loader thread for a whole switch interval. Forked children reseed, so
# they never share a stream; spawned ones seed afresh on import.
_write_ids = random.Random(os.urandom(32))
os.register_at_fork(after_in_child=lambda: _write_ids.seed(os.urandom(32)))


def new_write_id() -> str:
    """A unique id for one write: 128 random bits as 32 hex digits."""
    return f"{_write_ids.getrandbits(128):032x}"


def as_bytes(data: object) -> bytes:
    """Return ``data`` as ``bytes``, or raise ``InvalidDataError`` naming the type."""
    if isinstance(data, bytes):
        return data
    if isinstance(data, (bytearray, memoryview)):
        try:
            return bytes(data)
        except ValueError as exc:  # a released memoryview
            raise InvalidDataError(f"the value cannot be read: {exc}") from None
    raise InvalidDataError(
        f"a value must be bytes, bytearray or memoryview, not {type(data).__name__}; "
        "encode text first, e.g. value.encode('utf-8')"
    )
