"""Claims: take ownership of a key with ``put_if_absent``, and prove it by reading it back.

* :func:`claim` creates the key with a body naming the owner and a token unique to the
  call, then reads it back. A store that let two claimants win raises
  :class:`~gradientmail._errors.AtomicityViolationError` instead of silently double-loading.
* :class:`ClaimRecord` is what a claim key holds, written by :func:`claim_body` and read by
  :func:`parse_claim` / :func:`read_claim`.
* :func:`swap_claim` replaces a claim the caller read (a takeover, a completion, a
  release), and :func:`create_settled` creates any other record (a completion, a marker,
  a manifest, a pipeline's items). Both settle a write whose outcome the store could not report
  (``OutcomeUnknownError``) by a read, so a slow or flaky store never kills a learner.

Claims are JSON records, written and read with the one codec,
:mod:`gradientmail._record_codec`. Both patterns (``shared_queue`` and ``pipeline``) claim
through this module.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gradientmail._errors import (
    AtomicityViolationError,
    KeyNotFoundError,
    LeaseLostError,
    OutcomeUnknownError,
)
from gradientmail._record_codec import decode_record, encode_record
from gradientmail.backends._base import new_write_id
from gradientmail.backends._options import redact
from gradientmail.mailbox import Capability, Mailbox, Version

__all__ = [
    "SETTLE_ATTEMPTS",
    "ClaimRecord",
    "claim",
    "claim_body",
    "claim_versioned",
    "create_settled",
    "new_token",
    "parse_claim",
    "read_claim",
    "read_versioned",
    "swap_claim",
]

#: Writes whose outcome the store could not report are settled by a read and, where they did
#: not land, tried again: this many times in all, before the ambiguity is raised.
SETTLE_ATTEMPTS = 3

#: An atomicity violation (a claim reported as won but held by another) at WARNING.
_log = logging.getLogger(__name__)


def read_versioned(mailbox: Mailbox, key: str, cas: bool) -> tuple[bytes, Version | None] | None:
    """The bytes at ``key`` and, where ``cas`` (the mailbox compares and swaps), their
    version, in one request; ``None`` if the key is missing. Without ``cas`` the version is
    ``None``: a plain read."""
    try:
        if cas:
            return mailbox.get_versioned(key)
        return mailbox.get(key), None
    except KeyNotFoundError:
        return None


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
    return encode_record(body)


def parse_claim(data: bytes) -> ClaimRecord | None:
    """Parse a claim body; ``None`` when the bytes are not a claim written by :func:`claim`."""
    body = decode_record(data)
    if body is None or not isinstance(body.get("owner"), str):
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


def claim_versioned(
    mailbox: Mailbox, key: str, owner: str, **extra: Any
) -> tuple[ClaimRecord, Version | None] | None:
    """Like :func:`claim`, and also return the claim's record and version when won.

    The version (``None`` on a mailbox without compare-and-swap) lets the owner later
    change the claim only if nobody else has (``put_if_match``): complete it, release it.
    The read-back is ``get_versioned`` where supported, so it costs no extra request.

    Returns:
        ``(record, version)`` when this call owns the key, ``None`` when another claimant
        created it first.

    Raises:
        LeaseLostError: the win was real, but before it was read back another claimant took
            the claim over from ``owner`` (the new claim lists ``owner`` in ``previous``):
            this process was paused or cut off for longer than its lease.
        AtomicityViolationError: the store reported a win but holds another claim that
            never was ``owner``'s.
        BackendError: the store failed.
    """
    token = new_token()
    body = claim_body(owner, token, **extra)
    for attempt in range(1, SETTLE_ATTEMPTS + 1):
        try:
            won = mailbox.put_if_absent(key, body)
            break
        except OutcomeUnknownError:
            # The create may or may not have landed; the token we wrote decides it. Claim
            # keys are only ever written by claimants, so a foreign token means another
            # claim won, and no claim at all means ours did not land: it is sent again.
            stored = _read_versioned(mailbox, key)
            if stored is not None:
                return stored if stored[0].token == token else None
            if attempt == SETTLE_ATTEMPTS:
                raise
    if not won:
        return None
    stored = _read_versioned(mailbox, key)
    if stored is not None and stored[0].token != token and owner in previous_owners(stored[0]):
        # Our create won; then we stalled past our lease before this read, and a takeover
        # (by another learner, or by a newer incarnation of this one) replaced the claim.
        # The store is fine: this claimant is fenced, and must not use the claim.
        raise LeaseLostError(
            f"claim of {key!r} by {owner!r} was taken over by {stored[0].owner!r} before "
            "it could be read back: this process was paused or cut off for longer than its "
            "lease, so the claim is no longer its own",
            learner=owner,
            units=(key.rsplit("/", 1)[-1],),
        )
    if stored is None or stored[0].token != token:
        other = "nothing readable" if stored is None else f"a claim by {stored[0].owner!r}"
        url = redact(mailbox.url)
        _log.warning(
            "atomicity violation on %s: the claim of %r by %r was reported as won, but "
            "reading it back found %s",
            url,
            key,
            owner,
            other,
        )
        raise AtomicityViolationError(
            f"claim of {key!r} by {owner!r} was reported as won, but reading it back found "
            f"{other}: the store let two claimants win (or lost the write), so it is not "
            f"safe to coordinate on; check it with: gradientmail conformance {url}"
        )
    return stored


def previous_owners(record: ClaimRecord) -> list[str]:
    """The former owners a taken-over claim lists, oldest first (empty for a first claim)."""
    previous = record.extra.get("previous")
    return [str(p) for p in previous] if isinstance(previous, list) else []


def _read_versioned(mailbox: Mailbox, key: str) -> tuple[ClaimRecord, Version | None] | None:
    found = read_versioned(mailbox, key, mailbox.supports(Capability.COMPARE_AND_SWAP))
    if found is None:
        return None
    data, version = found
    record = parse_claim(data)
    return None if record is None else (record, version)


def claim(mailbox: Mailbox, key: str, owner: str, **extra: Any) -> bool:
    """Take ``key`` for ``owner`` with ``put_if_absent``, then read it back and check.

    Costs one conditional create, plus one read when the create wins. The body records
    ``owner`` and a token unique to this call (so two claimants that share an owner name are
    still told apart), the time, and any JSON-serialisable ``extra`` fields. A create whose
    outcome the store could not report (``OutcomeUnknownError``) is decided by reading the
    claim back: our token means we won.

    Returns:
        ``True`` when this call owns the key (verified by reading it back), ``False`` when
        another claimant created it first.

    Raises:
        AtomicityViolationError: ``put_if_absent`` reported a win but the key holds another
            claimant's body, or nothing: the store is not atomic, and loading would
            duplicate work. The message names both owners and how to check the store.
        BackendError: the store failed; never turned into ``False``.
    """
    return claim_versioned(mailbox, key, owner, **extra) is not None


def swap_claim(
    mailbox: Mailbox, key: str, owner: str, version: Version, **extra: Any
) -> Version | None:
    """Replace the claim at ``key``, read at ``version``, with a new claim of ``owner``'s.

    One ``put_if_match``, with a token unique to the call. A swap the store could not report
    is settled by reading the claim back: our token means it landed; the claim unchanged
    since ``version`` means it did not, and it is sent again; anything else means another
    learner changed the claim first.

    Returns:
        The new claim's version, or ``None`` when another learner changed the claim first.

    Raises:
        OutcomeUnknownError: still ambiguous after :data:`SETTLE_ATTEMPTS` tries.
    """
    token = new_token()
    body = claim_body(owner, token, **extra)
    for attempt in range(1, SETTLE_ATTEMPTS + 1):
        try:
            return mailbox.put_if_match(key, body, version)
        except OutcomeUnknownError as exc:
            stored = _read_versioned(mailbox, key)
            if stored is None:
                return None  # gone: not ours to hold
            record, current = stored
            if record.token == token:
                return current
            if current != version:
                return None  # another learner's swap came first
            if attempt == SETTLE_ATTEMPTS:
                raise
            _log.info("%r swaps claim %r again: the store could not tell (%s)", owner, key, exc)
    raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises


def create_settled(
    mailbox: Mailbox, key: str, data: bytes, same: Callable[[bytes], bool] | None = None
) -> bool:
    """``put_if_absent``, with an outcome the store could not report settled by a read.

    After an ambiguous create the key is read back: missing, the create did not land and is
    sent again; present, ``same(stored)`` says whether what is stored is as good as ours
    (our bytes, the same digest), and then the create counts as ours. Without ``same``, any
    record counts: for records whose presence is what counts (``done/{id}``, a marker).

    Returns:
        Whether the key now holds our record (or one as good), as ``put_if_absent`` would.

    Raises:
        OutcomeUnknownError: still ambiguous after :data:`SETTLE_ATTEMPTS` tries.
    """
    for attempt in range(1, SETTLE_ATTEMPTS + 1):
        try:
            return mailbox.put_if_absent(key, data)
        except OutcomeUnknownError as exc:
            try:
                stored = mailbox.get(key)
            except KeyNotFoundError:
                if attempt == SETTLE_ATTEMPTS:
                    raise
                _log.info("creating %r again: the store could not tell (%s)", key, exc)
                continue  # ours did not land (or not yet): create again
            return True if same is None else same(stored)
    raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises
