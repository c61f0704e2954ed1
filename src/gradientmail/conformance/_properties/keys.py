"""Properties that protect keys and listings: what names a store takes, and how it lists them.

A store that fails these still claims atomically, but code written against the contract
breaks when it moves there: keys mangled, merged or refused, listings out of order or
incomplete.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from gradientmail._errors import GradientMailError, InvalidKeyError
from gradientmail._keys import MAX_KEY_BYTES
from gradientmail.conformance._context import (
    Context,
    Property,
    PropertyFailed,
    PropertySkipped,
    error_text,
    get_or_none,
    key_text,
    shown,
)
from gradientmail.conformance._properties.listings import check_list_start_after
from gradientmail.mailbox import Capability

__all__ = [
    "KEY_PROPERTIES",
    "LONG_KEY_BYTES",
    "check_key_prefix_collision",
    "check_keys_accepted",
    "check_keys_long",
    "check_keys_rejected",
    "check_list_pagination",
    "check_list_prefixes",
]

#: Long keys every store must take, even below a prefix of a few hundred bytes.
LONG_KEY_BYTES = 512


def _exact_length_key(ctx: Context, piece: str, total: int = MAX_KEY_BYTES) -> str:
    """A key under the namespace of exactly ``total`` UTF-8 bytes, built from ``piece``."""
    key = ctx.key("")
    while len((key + piece).encode()) <= total:
        key += piece
    while len(key.encode()) < total:
        key += "z"
    return key


def check_keys_accepted(ctx: Context) -> str:
    """Keys with spaces, %, +, unicode and exactly 1024 bytes round-trip and list exactly."""
    box = ctx.box
    names = [
        "with space",
        "trailing space ",
        "per%cent",
        "per%2Fcent",
        "per/cent",
        "plus+sign",
        "unicodé/ключ/鍵/🙂",
        "tilde~star*paren()",
        "quote'dq\"amp&eq=semi;",
        "hash#question?",
        "back/slash",
        "a-b",
        "a.b",
        "UPPER/lower",
        "upper/LOWER",
        "dot.d/dot.v/dot.c",
    ]
    keys = [ctx.key(n) for n in names]
    for key in keys:
        data = key.encode("utf-8")
        try:
            created = box.put_if_absent(key, data)
        except GradientMailError as exc:
            raise PropertyFailed(
                f"put_if_absent({key_text(ctx.short(key))}) raised {error_text(exc)}"
            ) from exc
        if not created:
            # Each value is its own key's name, so what is stored names the other key.
            holder = get_or_none(box, key)
            other = holder.decode("utf-8", "replace") if holder is not None else None
            why = (
                f"the store maps it to the same object as {key_text(ctx.short(other))}"
                if other in keys
                else f"it already holds {shown(holder)}"
            )
            raise PropertyFailed(
                f"put_if_absent({key_text(ctx.short(key))}) on a new key returned False: {why}"
            )
        stored = get_or_none(box, key)
        if stored != data:
            raise PropertyFailed(f"get({key_text(ctx.short(key))}) returned {shown(stored)}")
    listed = list(box.list(ctx.key("")))
    if listed != sorted(keys):
        missing = sorted(set(keys) - set(listed))
        extra = sorted(set(listed) - set(keys))
        if missing or extra:
            raise PropertyFailed(
                f"list() differs from the keys written: missing {[ctx.short(k) for k in missing]}, "
                f"unexpected {[ctx.short(k) for k in extra]}"
            )
        raise PropertyFailed(f"list() is not in ascending order: {[ctx.short(k) for k in listed]}")
    for key in keys:
        if next(iter(box.list(key)), None) != key:
            raise PropertyFailed(
                f"list(prefix={key_text(ctx.short(key))}) does not start with the key"
            )
    return f"{len(keys)} keys with spaces, %, +, quotes and unicode round-trip and list"


def _long_key_round_trip(ctx: Context, key: str, label: str) -> None:
    box = ctx.box
    data = label.encode()
    try:
        created = box.put_if_absent(key, data)
    except GradientMailError as exc:
        raise PropertyFailed(f"put_if_absent of {label} raised {error_text(exc)}") from exc
    if not created or get_or_none(box, key) != data:
        raise PropertyFailed(f"{label} did not round-trip (put_if_absent returned {created})")
    if key not in box.list(ctx.key("")):
        raise PropertyFailed(f"{label} is not listed")


def check_keys_long(ctx: Context) -> str:
    """Long keys work: 512 bytes in one segment or many; 1024 bytes, or a clear refusal.

    Object stores limit the *whole* object name to 1024 bytes, so below a prefix (the CLI
    always works below one) a backend cannot store a key of exactly 1024 bytes. A clear
    ``InvalidKeyError`` up front is the right behaviour there; the 1024-byte part then
    reports SKIP with the backend's reason, while the 512-byte keys must still work.
    """
    for piece, shape in (("k", "one segment"), ("ü/é", "many segments")):
        key = _exact_length_key(ctx, piece, LONG_KEY_BYTES)
        _long_key_round_trip(ctx, key, f"a {LONG_KEY_BYTES}-byte key in {shape}")
    refused = None
    for piece, shape in (("k", "one segment"), ("ü/é", "many segments")):
        key = _exact_length_key(ctx, piece)
        try:
            _long_key_round_trip(ctx, key, f"a {MAX_KEY_BYTES}-byte key in {shape}")
        except PropertyFailed as exc:
            if isinstance(exc.__cause__, InvalidKeyError):
                refused = exc.__cause__
                break
            raise
    if refused is not None:
        raise PropertySkipped(
            f"{LONG_KEY_BYTES}-byte keys work, but this mailbox refuses {MAX_KEY_BYTES}-byte "
            f"keys up front: {refused.rule}"
        )
    return f"keys of {LONG_KEY_BYTES} and {MAX_KEY_BYTES} bytes, in one segment or many, round-trip"


def check_keys_rejected(ctx: Context) -> str:
    """Invalid keys raise InvalidKeyError naming the rule, for every operation, writing nothing."""
    box = ctx.box
    over = _exact_length_key(ctx, "k", MAX_KEY_BYTES + 1)
    bad = [
        "",
        ".",
        "..",
        ctx.key("") + "/x",
        ctx.key("x/"),
        "/" + ctx.key("x"),
        ctx.key("./x"),
        ctx.key("../x"),
        ctx.key("x/.."),
        ctx.key("nul\x00byte"),
        ctx.key("new\nline"),
        ctx.key("del\x7f"),
        ctx.key("back\\slash"),
        over,
    ]
    operations: list[tuple[str, Callable[[str], object]]] = [
        ("put_if_absent", lambda k: box.put_if_absent(k, b"x")),
        ("put", lambda k: box.put(k, b"x")),
        ("get", box.get),
        ("delete", box.delete),
    ]
    if box.supports(Capability.COMPARE_AND_SWAP):
        operations.append(("get_versioned", box.get_versioned))
    for key in bad:
        for name, operation in operations:
            try:
                operation(key)
            except InvalidKeyError as exc:
                if not str(exc):
                    raise PropertyFailed(
                        f"{name}({key_text(key)}) raised InvalidKeyError without a message"
                    ) from exc
                continue
            except Exception as exc:
                raise PropertyFailed(
                    f"{name}({key_text(key)}) raised {type(exc).__name__}, not InvalidKeyError"
                ) from exc
            raise PropertyFailed(
                f"{name}({key_text(key)}) was accepted; it must raise InvalidKeyError"
            )
    try:
        box.list(ctx.key("bad\x01prefix"))
    except InvalidKeyError:
        pass
    else:
        raise PropertyFailed("list() of a prefix with a control character was accepted")
    leftover = list(box.list(ctx.key("")))
    if leftover:
        raise PropertyFailed(f"rejected keys were written anyway: {leftover[:3]}")
    return f"{len(bad)} invalid keys rejected by {len(operations)} operations; nothing written"


def check_key_prefix_collision(ctx: Context) -> str:
    """``a`` and ``a/b`` coexist in either creation order (SeaweedFS fails the first)."""
    box = ctx.box
    orders = [("p1", ["a/b", "a"]), ("p2", ["a", "a/b"]), ("p3", ["a/b/c", "a"])]
    for group, order in orders:
        for name in order:
            key = ctx.key(f"{group}/{name}")
            try:
                created = box.put_if_absent(key, name.encode())
            except GradientMailError as exc:
                raise PropertyFailed(
                    f"key/prefix collision: put_if_absent('{group}/{name}') after creating "
                    f"'{group}/{order[0]}' raised {error_text(exc)}"
                ) from exc
            if not created:
                present = get_or_none(box, key)
                state = "yet get() says it does not exist" if present is None else "and it exists"
                raise PropertyFailed(
                    f"key/prefix collision: put_if_absent('{group}/{name}') returned False "
                    f"after '{group}/{order[0]}' was created, {state}: the store treats a key "
                    "that is also a prefix of another key (or the reverse) as taken"
                )
        for name in order:
            stored = get_or_none(box, ctx.key(f"{group}/{name}"))
            if stored != name.encode():
                raise PropertyFailed(
                    f"key/prefix collision: get('{group}/{name}') is {shown(stored)}"
                )
        listed = ctx.listed(ctx.key(group + "/"))
        expected = sorted(f"{group}/{n}" for n in order)
        if listed != expected:
            raise PropertyFailed(
                f"key/prefix collision: list('{group}/') is {listed}, not {expected}"
            )
    return "'a' beside 'a/b' and 'a/b/c', created in either order, read and listed"


def check_list_prefixes(ctx: Context) -> str:
    """``list`` is a plain string prefix match in ascending order: ``a/`` is not ``ab``."""
    box = ctx.box
    names = ["a", "a/1", "a/2/x", "a-1", "a.b", "a0", "ab", "ab/c", "b", "é", "z\u00ff"]
    for name in names:
        box.put(ctx.key(name), b"")
    cases = ["a/", "a", "ab", "a/2", "b", "c", "", "é", "a/1"]
    for prefix in cases:
        got = ctx.listed(ctx.key(prefix))
        expected = sorted(n for n in names if n.startswith(prefix))
        if got != expected and sorted(got) == expected:
            first = next(i for i, (g, e) in enumerate(zip(got, expected, strict=True)) if g != e)
            raise PropertyFailed(
                f"list(prefix={prefix!r}) is not in ascending order: {got[first]!r} came before "
                f"{expected[first]!r} (full listing {got})"
            )
        if got != expected:
            raise PropertyFailed(f"list(prefix={prefix!r}) returned {got}, expected {expected}")
    return f"{len(cases)} prefixes incl. 'a/' vs 'ab' list exactly, in ascending order"


def check_list_pagination(ctx: Context) -> str:
    """Listings past 1000 keys (one page on most stores) return every key once, in order."""
    box = ctx.box
    total = 1001 if ctx.options.quick else 2001
    keys = [ctx.key(f"page/{i:05d}") for i in range(total)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda k: box.put(k, b"p"), keys))
    stream = box.list(ctx.key("page/"))
    if iter(stream) is not stream:
        raise PropertyFailed(
            f"list() returned a {type(stream).__name__}, not an iterator: keys must be "
            "streamed page by page, never gathered into one list first"
        )
    got = list(stream)
    if got != keys:
        seen = set(got)
        missing = [ctx.short(k) for k in keys if k not in seen]
        duplicates = len(got) - len(seen)
        raise PropertyFailed(
            f"listing {total} keys returned {len(got)} ({duplicates} duplicates); first missing: "
            f"{missing[:3]}; in order: {got == sorted(got)}"
        )
    middle = ctx.listed(ctx.key("page/000"))
    expected = [ctx.short(k) for k in keys if k.startswith(ctx.key("page/000"))]
    if middle != expected:
        raise PropertyFailed(
            f"list('page/000') returned {len(middle)} keys, expected {len(expected)}"
        )
    return f"{total} keys listed once each, in order; a {len(expected)}-key sub-prefix too"


#: In report order: which keys are accepted, then how they list.
KEY_PROPERTIES: tuple[Property, ...] = (
    Property(
        "keys-accepted",
        "keys with spaces, %, +, quotes or unicode mangled, refused, or merged into one object",
        check_keys_accepted,
    ),
    Property(
        "keys-long",
        "long keys or long segments failing, or 1024-byte keys failing deep in the store",
        check_keys_long,
    ),
    Property(
        "keys-rejected",
        "invalid keys silently accepted, so code breaks when it moves to another store",
        check_keys_rejected,
    ),
    Property(
        "key-prefix-collision",
        "'a' and 'a/b' unable to coexist, so claims under nested names fail",
        check_key_prefix_collision,
    ),
    Property(
        "list-prefixes",
        "list('a/') returning 'ab', or keys out of order",
        check_list_prefixes,
    ),
    Property(
        "list-pagination",
        "keys lost or repeated once a listing passes one page (1000 keys)",
        check_list_pagination,
    ),
    Property(
        "list-start-after",
        "a listing resumed after a key repeating or skipping keys (the start point ignored, "
        "off by one, or lost at a page end)",
        check_list_start_after,
        (Capability.LIST_START_AFTER,),
        needs=("hypothesis",),
    ),
)
