"""The one JSON codec for every record gradientmail stores.

Claims, leases, progress records, manifests, markers, the pipeline's records and the
exchange's ledger are all JSON objects, written by :func:`encode_record` (compact UTF-8) and
read by :func:`decode_record`, which never raises: bytes that are not a JSON object read as
``None``, and each reader decides what a missing or foreign record means.
"""

from __future__ import annotations

import json
from typing import Any

from gradientmail._errors import KeyNotFoundError
from gradientmail.mailbox import Mailbox

__all__ = ["decode_record", "encode_record", "read_record"]


def encode_record(record: dict[str, Any]) -> bytes:
    """A record as compact UTF-8 JSON: the one encoder for every record stored."""
    return json.dumps(record, separators=(",", ":")).encode("utf-8")


def decode_record(data: bytes) -> dict[str, Any] | None:
    """A JSON object record, or ``None`` when ``data`` is not one (never raises)."""
    try:
        record = json.loads(data)
    except (UnicodeDecodeError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def read_record(mailbox: Mailbox, key: str) -> dict[str, Any] | None:
    """The JSON object stored at ``key``; ``None`` if the key is missing or holds no object."""
    try:
        return decode_record(mailbox.get(key))
    except KeyNotFoundError:
        return None
