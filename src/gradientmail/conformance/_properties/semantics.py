"""Properties that protect the operations' meaning, one client at a time.

Reads see the latest write at once, missing keys and deletes behave, a create-only write
is refused on an existing key, compare-and-swap refuses stale versions, a write whose
response was lost is still reported as won, and any sequence of operations agrees with a
plain ``dict`` (the stateful model, :mod:`gradientmail.conformance._model`).
"""

from __future__ import annotations

from gradientmail._errors import KeyNotFoundError, NotSupportedError, TransientBackendError
from gradientmail.backends._base import BaseMailbox, Conflict
from gradientmail.conformance._context import (
    Context,
    Property,
    PropertyFailed,
    PropertySkipped,
    get_or_none,
    shown,
)
from gradientmail.mailbox import Capability, Mailbox, Version

__all__ = [
    "SEMANTIC_PROPERTIES",
    "check_compare_and_swap",
    "check_lost_response",
    "check_missing_and_delete",
    "check_precondition_honoured",
    "check_read_after_write",
    "check_stateful_model",
    "versions_name_bytes",
]


def check_read_after_write(ctx: Context) -> str:
    """Right after a write returns, another client's get and list see it (and deletes)."""
    box = ctx.box
    other = ctx.other_client()
    rounds = 10 if ctx.options.quick else 30
    for i in range(rounds):
        key = ctx.key(f"raw/{i}")
        first, second = f"first {i}".encode(), f"second {i}".encode()
        if not box.put_if_absent(key, first):
            raise PropertyFailed(f"put_if_absent('raw/{i}') on a new key returned False")
        seen = get_or_none(other, key)
        if seen != first:
            raise PropertyFailed(f"right after put_if_absent('raw/{i}'), get() saw {shown(seen)}")
        if next(iter(other.list(key)), None) != key:
            raise PropertyFailed(f"right after put_if_absent('raw/{i}'), list() did not show it")
        box.put(key, second)
        seen = get_or_none(other, key)
        if seen != second:
            raise PropertyFailed(
                f"right after put('raw/{i}'), get() saw {shown(seen)}, not the new value"
            )
        box.delete(key)
        seen = get_or_none(other, key)
        if seen is not None:
            raise PropertyFailed(f"right after delete('raw/{i}'), get() still saw {shown(seen)}")
        if next(iter(other.list(key)), None) == key:
            raise PropertyFailed(f"right after delete('raw/{i}'), list() still showed it")
    return f"{rounds} create/overwrite/delete rounds seen at once by a second client"


def check_missing_and_delete(ctx: Context) -> str:
    """Missing keys raise KeyNotFoundError; delete is idempotent; deleted keys can be re-created."""
    box = ctx.box
    key = ctx.key("gone")
    try:
        box.get(key)
    except KeyNotFoundError as exc:
        if not isinstance(exc, LookupError):
            raise PropertyFailed("KeyNotFoundError is not a LookupError") from exc
    else:
        raise PropertyFailed("get() of a key never written did not raise KeyNotFoundError")
    if box.supports(Capability.COMPARE_AND_SWAP):
        try:
            box.get_versioned(key)
        except KeyNotFoundError:
            pass
        else:
            raise PropertyFailed("get_versioned() of a missing key did not raise KeyNotFoundError")
    box.delete(key)  # never written: not an error
    if not box.put_if_absent(key, b"1"):
        raise PropertyFailed("put_if_absent on a new key returned False")
    box.delete(key)
    box.delete(key)  # twice: still not an error
    if get_or_none(box, key) is not None:
        raise PropertyFailed("get() after delete() still returns the value")
    if not box.put_if_absent(key, b"2"):
        raise PropertyFailed(
            "put_if_absent after delete() returned False: a deleted key must be creatable"
        )
    if box.get(key) != b"2":
        raise PropertyFailed("a re-created key does not hold its new value")
    return "missing get raises KeyNotFoundError; delete is idempotent; deleted keys re-create"


def check_precondition_honoured(ctx: Context) -> str:
    """A second put_if_absent on an existing key returns False and changes nothing."""
    box = ctx.box
    key = ctx.key("once")
    if not box.put_if_absent(key, b"first"):
        raise PropertyFailed("put_if_absent on a new key returned False")
    second = box.put_if_absent(key, b"second")
    stored = get_or_none(box, key)
    if second:
        raise PropertyFailed(
            "declared-but-ignored precondition: a second put_if_absent on an existing key "
            f"returned True (the store now holds {shown(stored)}): the store does not "
            "enforce create-only writes"
        )
    if stored != b"first":
        raise PropertyFailed(f"a losing put_if_absent changed the stored value to {shown(stored)}")
    box.put(key, b"third")
    if box.get(key) != b"third":
        raise PropertyFailed("put() did not replace an existing value")
    if box.put_if_absent(key, b"fourth") or box.get(key) != b"third":
        raise PropertyFailed("put_if_absent after put() overwrote the key")
    return "a second create returns False and leaves the first value; put() overwrites"


def versions_name_bytes(box: object) -> bool:
    """Whether ``box`` declares that a version names the bytes stored, not one write.

    ``True`` for a :class:`~gradientmail.backends._base.BaseMailbox` that sets
    ``versions_name_bytes`` (S3: the ETag); any other mailbox is held to the stronger
    promise, that versions never repeat for a key.
    """
    return isinstance(box, BaseMailbox) and box.versions_name_bytes


def check_compare_and_swap(ctx: Context) -> str:
    """CAS: a current version swaps; a stale, foreign or missing one returns None; ABA as promised.

    Each backend makes one of two promises, and the summary states which was checked:

    * a version names one write (memory://, file://, GCS, Azure): it never repeats for a
      key, so after ``put`` rewrote the original bytes, the first version must not match;
    * a version names the bytes stored (S3's ETag, declared by ``versions_name_bytes``):
      identical bytes may share a version, so the first version may match again (ABA),
      and the summary says whether it did. It must still never match different bytes.
    """
    box = ctx.box
    key = ctx.key("cas")
    if not box.supports(Capability.COMPARE_AND_SWAP):
        for name, call in (
            ("get_versioned", lambda: box.get_versioned(key)),
            ("put_if_match", lambda: box.put_if_match(key, b"x", Version("x"))),
        ):
            try:
                call()
            except NotSupportedError:
                continue
            except Exception as exc:
                raise PropertyFailed(
                    f"compare-and-swap is not declared, but {name}() raised "
                    f"{type(exc).__name__} instead of NotSupportedError"
                ) from exc
            raise PropertyFailed(f"compare-and-swap is not declared, but {name}() did not raise")
        raise PropertySkipped(
            f"{box.url} does not declare Capability.COMPARE_AND_SWAP (its CAS methods "
            "correctly raise NotSupportedError)"
        )
    by_bytes = versions_name_bytes(box)
    box.put(key, b"v1")
    data, v1 = box.get_versioned(key)
    if data != b"v1":
        raise PropertyFailed(f"get_versioned() returned {shown(data)} after put(b'v1')")
    v2 = box.put_if_match(key, b"v2", v1)
    if v2 is None:
        raise PropertyFailed("put_if_match with the current version returned None")
    if box.get(key) != b"v2":
        raise PropertyFailed("put_if_match with the current version did not store the new value")
    if box.put_if_match(key, b"stale", v1) is not None or box.get(key) != b"v2":
        raise PropertyFailed("put_if_match with a stale version succeeded")
    v3 = box.put_if_match(key, b"v3", v2)
    if v3 is None or box.get(key) != b"v3":
        raise PropertyFailed(
            "put_if_match with the version returned by the previous put_if_match failed"
        )
    aba = _check_aba(box, key, v1, by_bytes)
    other = ctx.key("cas-other")
    box.put(other, b"v1")
    if box.put_if_match(other, b"foreign", v3) is not None:
        raise PropertyFailed("put_if_match on one key matched a version taken from another key")
    missing = ctx.key("cas-missing")
    if box.put_if_match(missing, b"x", v3) is not None or get_or_none(box, missing) is not None:
        raise PropertyFailed("put_if_match on a missing key created it")
    box.delete(other)
    box.put(other, b"v1")
    data, fresh = box.get_versioned(other)
    if box.put_if_match(other, b"ok", fresh) is None:
        raise PropertyFailed("put_if_match failed with a fresh version of a re-created key")
    if by_bytes:
        return (
            "versions name the bytes stored (declared): current version swaps; stale, foreign "
            f"and missing versions change nothing; {aba}"
        )
    return (
        "versions name one write: current version swaps; stale, ABA, foreign and missing "
        "versions change nothing"
    )


def _check_aba(box: Mailbox, key: str, first: Version, by_bytes: bool) -> str:
    """Rewrite the bytes ``first`` named, then swap from ``first``: what the promise allows."""
    box.put(key, b"v1")
    revived = box.put_if_match(key, b"aba", first)
    stored = get_or_none(box, key)
    if revived is None:
        if stored != b"v1":
            raise PropertyFailed(
                f"a refused put_if_match changed the stored value to {shown(stored)}"
            )
        return "rewriting identical bytes did not revive the first version"
    if not by_bytes:
        raise PropertyFailed(
            "ABA: after put() rewrote the original bytes, the first version matched again; "
            "versions must never repeat (a content hash is not a version), unless the "
            "backend declares versions_name_bytes"
        )
    if stored != b"aba":
        raise PropertyFailed(
            f"put_if_match with a revived version returned a version but stored {shown(stored)}"
        )
    return "rewriting identical bytes revived the first version (ABA), as declared"


def check_lost_response(ctx: Context) -> str:
    """A create whose response is lost is still reported as won (write id read back)."""
    box = ctx.box
    if not isinstance(box, BaseMailbox):
        raise PropertySkipped(
            f"{type(box).__name__} is not a gradientmail BaseMailbox, so the suite cannot "
            "inject a lost response into it"
        )
    probe = ctx.other_client()
    assert isinstance(probe, BaseMailbox)
    real_create = probe._create
    calls: list[str] = []

    def create_then_lose(key: str, data: bytes, write_id: str) -> Version | Conflict:
        calls.append(key)
        outcome = real_create(key, data, write_id)
        if len(calls) == 1:
            raise TransientBackendError(
                "injected by the conformance suite: the response was lost", key=key
            )
        return outcome

    probe._create = create_then_lose  # type: ignore[method-assign]
    key = ctx.key("lost")
    won = probe.put_if_absent(key, b"mine")
    if len(calls) < 2:
        raise PropertyFailed("put_if_absent did not retry after a transient failure")
    if not won:
        raise PropertyFailed(
            "a create that landed but whose response was lost was reported as False: the "
            "retry collided with our own object and nothing read the write id back"
        )
    if box.get(key) != b"mine":
        raise PropertyFailed(f"after a lost response the key holds {shown(get_or_none(box, key))}")
    if not box.supports(Capability.COMPARE_AND_SWAP):
        return "a create whose response was lost is reported as won (CAS not declared)"
    _, version = box.get_versioned(key)
    real_replace = probe._replace
    replaces: list[str] = []

    def replace_then_lose(key: str, data: bytes, ver: Version, write_id: str) -> Version | Conflict:
        replaces.append(key)
        outcome = real_replace(key, data, ver, write_id)
        if len(replaces) == 1:
            raise TransientBackendError("injected: the response was lost", key=key)
        return outcome

    probe._replace = replace_then_lose  # type: ignore[method-assign,assignment]
    if probe.put_if_match(key, b"swapped", version) is None:
        raise PropertyFailed("a put_if_match that landed but whose response was lost returned None")
    if box.get(key) != b"swapped":
        raise PropertyFailed(
            "after a lost put_if_match response the key does not hold the new value"
        )
    return "creates and swaps whose responses were lost are reported as won"


def check_stateful_model(ctx: Context) -> str:
    """A hypothesis state machine holds the store to a dict model, shrinking any failure."""
    from gradientmail.conformance._model import run_model

    return run_model(ctx)


#: In report order: single-client semantics, injected faults, then the model.
SEMANTIC_PROPERTIES: tuple[Property, ...] = (
    Property(
        "read-after-write",
        "another node missing a key (or seeing an old value) right after a write returned",
        check_read_after_write,
    ),
    Property(
        "missing-and-delete",
        "missing keys not raising KeyNotFoundError, or deleted keys that cannot be re-created",
        check_missing_and_delete,
    ),
    Property(
        "precondition-honoured",
        "a store that ignores create-only preconditions, so every claimant 'wins'",
        check_precondition_honoured,
        (Capability.ATOMIC_CREATE,),
        atomicity=True,
    ),
    Property(
        "compare-and-swap",
        "a stale or recycled version overwriting a newer value",
        check_compare_and_swap,
    ),
    Property(
        "lost-response",
        "a create that landed but lost its response being reported as lost, so nobody owns it",
        check_lost_response,
        (Capability.ATOMIC_CREATE,),
        atomicity=True,
    ),
    Property(
        "stateful-model",
        "any sequence of operations where the store disagrees with a plain dict",
        check_stateful_model,
        needs=("hypothesis",),
    ),
)
