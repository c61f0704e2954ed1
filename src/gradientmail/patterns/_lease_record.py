"""A lease's record: what its holder writes, and what the holder knows of its own."""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from typing import Any

from gradientmail._record_codec import encode_record
from gradientmail.mailbox import Version

__all__ = ["OwnRecord", "lease_record"]


def lease_record(
    holder: str, incarnation: int, token: str, seq: int, state: str, duration: float, **extra: Any
) -> bytes:
    """A lease record: who holds it, which incarnation and write, its state and duration."""
    body: dict[str, Any] = {
        "holder": holder,
        "incarnation": incarnation,
        "token": token,
        "seq": seq,
        "state": state,
        "lease": duration,
        "renewed_at": time.time(),
        "host": socket.gethostname(),
        "pid": os.getpid(),
    }
    body.update(extra)
    return encode_record(body)


@dataclass
class OwnRecord:
    """What a holder knows of its own lease record.

    ``token`` names the holder in every record it writes; ``seq`` counts its writes;
    ``version`` is its last write's (``None`` without compare-and-swap); ``fresh_until``
    (on the holder's clock, ``time.monotonic`` by default) is when an observer may start to
    count it silent; ``lost`` says why another took the lease, once this holder learnt it.
    """

    token: str
    seq: int = 0
    version: Version | None = None
    fresh_until: float = 0.0
    lost: str | None = None
    #: writes that renewed it.
    renewals: int = 0
