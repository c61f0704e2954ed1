"""Properties that protect values: the bytes written are the bytes read, at any size."""

from __future__ import annotations

import random
from typing import Any

from gradientmail.conformance._context import Context, Property, PropertyFailed, get_or_none, shown
from gradientmail.mailbox import Capability

__all__ = ["VALUE_PROPERTIES", "check_values_any_bytes", "check_values_large"]


def check_values_any_bytes(ctx: Context) -> str:
    """Empty values and every byte value are stored exactly; bytearray/memoryview accepted."""
    box = ctx.box
    cases: list[tuple[str, Any, bytes]] = [
        ("empty", b"", b""),
        ("all-bytes", bytes(range(256)), bytes(range(256))),
        ("bytearray", bytearray(b"ba"), b"ba"),
        ("memoryview", memoryview(b"mv"), b"mv"),
    ]
    for name, data, expected in cases:
        if not box.put_if_absent(ctx.key(name), data):
            raise PropertyFailed(f"put_if_absent of the {name} value on a new key returned False")
        stored = get_or_none(box, ctx.key(name))
        if stored != expected:
            raise PropertyFailed(f"{name} value: get() returned {shown(stored)}")
    box.put(ctx.key("put-empty"), b"")
    if get_or_none(box, ctx.key("put-empty")) != b"":
        raise PropertyFailed("put(key, b'') then get() did not return b''")
    if ctx.listed(ctx.key("")) != sorted([*(c[0] for c in cases), "put-empty"]):
        raise PropertyFailed(f"list() of empty-valued keys returned {ctx.listed(ctx.key(''))}")
    if box.supports(Capability.COMPARE_AND_SWAP):
        data, _ = box.get_versioned(ctx.key("empty"))
        if data != b"":
            raise PropertyFailed(f"get_versioned() of an empty value returned {shown(data)}")
    return "empty values, all 256 byte values, bytearray and memoryview stored exactly"


def check_values_large(ctx: Context) -> str:
    """8 MiB values round-trip exactly through put_if_absent and put."""
    box = ctx.box
    size = 8 << 20
    rng = random.Random(ctx.seed)
    first = rng.randbytes(size)
    if not box.put_if_absent(ctx.key("big"), first):
        raise PropertyFailed("put_if_absent of an 8 MiB value on a new key returned False")
    stored = box.get(ctx.key("big"))
    if stored != first:
        raise PropertyFailed(
            f"8 MiB value read back as {len(stored)} bytes, differing from what was written"
        )
    second = rng.randbytes(size)
    box.put(ctx.key("big"), second)
    stored = box.get(ctx.key("big"))
    if stored != second:
        raise PropertyFailed(
            f"8 MiB overwrite read back as {len(stored)} bytes, not the bytes written"
        )
    return "8 MiB values created, overwritten and read back byte for byte"


#: In report order.
VALUE_PROPERTIES: tuple[Property, ...] = (
    Property(
        "values-any-bytes",
        "empty or binary values coming back changed",
        check_values_any_bytes,
    ),
    Property(
        "values-large",
        "large (8 MiB) values truncated or corrupted",
        check_values_large,
    ),
)
