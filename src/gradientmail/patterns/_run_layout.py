"""A ``shared_queue`` run's layout in its mailbox, and its manifest.

Every key a ``shared_queue`` run writes is named here, and nowhere else, so
``gradientmail status`` and the queue read the same keys.

``manifest``
    ``{"units": total, "digest": sha256 of the sorted identifiers, "values": sha256 of the
    identifiers with their values as JSON (absent when a value is not JSON), "created_at":
    unix seconds}``, created with ``put_if_absent`` by the first learner to start. A learner
    whose mapping has another digest, or the same identifiers with values of another
    fingerprint, is refused, so runs are never mixed.
``manifest-units/{digest}``
    The sorted identifiers as a JSON list, under the digest they hash to, read only to name
    the first difference when a mapping does not match. Each job writes its own, so a job
    refused in a race for the manifest never leaves its list as the run's (it deletes it).
``units/{identifier}``
    One claim per unit taken: ``{"owner", "token", "claimed_at", "incarnation", "state":
    "claimed" | "done" | "released", "previous": [former owners]}`` (see
    :mod:`gradientmail.patterns._claims`). Taking over, completing and releasing are
    compare-and-swap writes on this key.
``done/{identifier}``
    The unit's completion record, created once (``put_if_absent``) after its claim moved to
    ``done``. Resume and status count these keys by listing, never by reading claims.
``reclaimed/{identifier}``
    Created when a unit was taken over from a learner that died or left, for status.
``idle/{learner_id}``
    Created when a learner holds no unit of the epoch and finds none free; deleted before
    it takes one over. A learner that finished, left, died or works on another epoch is
    marked by whoever finds that out. When every leased learner is marked, one listing of
    ``done/`` tells whether the epoch is over
    (:mod:`gradientmail.patterns.shared_queue._idle_markers`).
``complete``
    ``{"by", "units", "at"}``, created by the learner whose listing of ``done/`` showed every
    unit of the epoch done; it ends the epoch for the learners still waiting.
``leases/{learner_id}``
    The learner's lease (:mod:`gradientmail.patterns._leases`).
``learners/{learner_id}``
    A :class:`~gradientmail.session.Session`'s progress record.
``epochs/{k}/units/``, ``.../done/``, ``.../reclaimed/``, ``.../idle/``, ``.../complete``
    The same for epoch ``k`` >= 1; epoch 0 uses the keys above. Manifest, leases and
    progress records are shared by all epochs.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gradientmail._errors import (
    RunMismatchError,
)
from gradientmail._record_codec import decode_record, encode_record, read_record
from gradientmail.mailbox import Mailbox
from gradientmail.patterns._claims import create_settled

__all__ = [
    "EPOCHS_PREFIX",
    "LEARNERS_PREFIX",
    "LEASES_PREFIX",
    "MANIFEST_KEY",
    "MANIFEST_UNITS_KEY",
    "UNITS_PREFIX",
    "RunLayout",
    "check_manifest",
    "digest_of",
    "values_digest",
]

#: ``{"units": total, ...}``, created by the first learner to start.
MANIFEST_KEY = "manifest"
#: Claims live under this prefix: ``units/{identifier}``.
UNITS_PREFIX = "units/"
#: Progress records live under this prefix: ``learners/{learner_id}``.
LEARNERS_PREFIX = "learners/"
#: Leases live under this prefix: ``leases/{learner_id}``.
LEASES_PREFIX = "leases/"
#: The sorted unit identifiers, for naming a mismatch: under ``{MANIFEST_UNITS_KEY}/{digest}``.
MANIFEST_UNITS_KEY = "manifest-units"
#: Epochs after the first live under ``epochs/{k}/``.
EPOCHS_PREFIX = "epochs/"


#: Each key of an epoch, after its base.
_EPOCH_KEYS = (
    ("base", ""),
    ("units", UNITS_PREFIX),
    ("done", "done/"),
    ("reclaimed", "reclaimed/"),
    ("complete", "complete"),
    ("idle", "idle/"),
)


@dataclass(frozen=True)
class RunLayout:
    """The keys of one epoch of a run, all under ``base`` (``""`` for epoch 0,
    ``epochs/{k}/`` after it): the claims' prefix ``units``, the completion records'
    prefix ``done``, the takeover markers' prefix ``reclaimed``, the ``complete`` record
    (created once a listing of ``done/`` showed every unit of the epoch done), and the
    prefix of the ``idle`` markers (learners that hold no unit and find none free)."""

    epoch: int = 0
    base: str = field(init=False, repr=False, compare=False)
    units: str = field(init=False, repr=False, compare=False)
    done: str = field(init=False, repr=False, compare=False)
    reclaimed: str = field(init=False, repr=False, compare=False)
    complete: str = field(init=False, repr=False, compare=False)
    idle: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        base = "" if self.epoch == 0 else f"{EPOCHS_PREFIX}{self.epoch}/"
        for attribute, suffix in _EPOCH_KEYS:
            object.__setattr__(self, attribute, base + suffix)  # frozen: set once, here


def digest_of(identifiers: Iterable[str]) -> str:
    """The manifest digest: SHA-256 over the sorted identifiers, one per line."""
    ordered = sorted(identifiers)
    joined = "\n".join(ordered) + "\n" if ordered else ""
    return hashlib.sha256(joined.encode("utf-8")).hexdigest()


def values_digest(units: Mapping[str, Any]) -> str | None:
    """SHA-256 over each unit's identifier and value as JSON, in identifier order.

    ``None`` when a value is not JSON (a tensor, a custom object): such values cannot be
    hashed the same way on every host, so the run records no fingerprint of them.
    """
    digest = hashlib.sha256()
    try:
        for ident in sorted(units):
            encoded = json.dumps([ident, units[ident]], sort_keys=True, allow_nan=False)
            digest.update(encoded.encode("utf-8") + b"\n")
    except (TypeError, ValueError):
        return None
    return digest.hexdigest()


def check_manifest(
    mailbox: Mailbox, identifiers: list[str], units: Mapping[str, Any] | None = None
) -> bool:
    """Create the run's manifest, or check that ``identifiers`` match the stored one.

    Returns:
        ``True`` when this call created the manifest (a new run), ``False`` when it
        matched an existing one (a resumed run, or another learner was first).

    Raises:
        RunMismatchError: the run at this mailbox has other units; the message names the
            counts and the first identifier (in sorted order) that differs. Or the same
            identifiers with other values: with ``units`` whose values are JSON, the
            manifest records their fingerprint (``values``), and a learner whose values
            hash otherwise is refused. Values that are not JSON are not fingerprinted.
    """
    ordered = sorted(identifiers)
    digest = digest_of(ordered)
    values = None if units is None else values_digest(units)
    # One read first: a learner joining a run does not upload the identifier list (a
    # megabyte for 100,000 units) only to have the store refuse it.
    stored = read_record(mailbox, MANIFEST_KEY)
    wrote_list = False
    if stored is None:
        # The list first: whoever reads the manifest can then always read the list.
        own_list = f"{MANIFEST_UNITS_KEY}/{digest}"
        listed = json.dumps(ordered).encode("utf-8")
        wrote_list = create_settled(mailbox, own_list, listed, lambda data: data == listed)
        body = {"units": len(identifiers), "digest": digest, "created_at": time.time()}
        if values is not None:
            body["values"] = values
        created = create_settled(
            mailbox,
            MANIFEST_KEY,
            encode_record(body),
            lambda data: (decode_record(data) or {}).get("digest") == digest,
        )
        if created:
            return True
        stored = read_record(mailbox, MANIFEST_KEY)
    stored = stored or {}
    if stored.get("digest") == digest:
        theirs_values = stored.get("values")
        if values is not None and isinstance(theirs_values, str) and theirs_values != values:
            raise RunMismatchError(
                f"the run at {mailbox.url} has the same {len(identifiers)} unit identifiers "
                "but other unit values (their fingerprint differs): resuming would mix old "
                "and new data in one run. Pass the same units mapping, or start the new "
                "data under a new prefix in the URL"
            )
        return False
    if wrote_list:
        # Another job won the manifest: this job's list is not the run's.
        mailbox.delete(f"{MANIFEST_UNITS_KEY}/{digest}")
    if "digest" not in stored:
        raise RunMismatchError(
            f"{mailbox.url} holds a run written without a unit digest "
            f"(manifest {stored}); start this run under a new prefix"
        )
    theirs: list[str] = []
    try:
        loaded = json.loads(mailbox.get(f"{MANIFEST_UNITS_KEY}/{stored['digest']}"))
        theirs = [str(x) for x in loaded] if isinstance(loaded, list) else []
    except (LookupError, ValueError):
        pass
    first = next(
        (f"{a!r} here, {b!r} in the run" for a, b in zip(ordered, theirs, strict=False) if a != b),
        None,
    )
    if not theirs and stored.get("units"):
        first = "not known: the run's identifier list could not be read"
    elif first is None and len(ordered) != len(theirs):
        shorter, longer = (ordered, theirs) if len(ordered) < len(theirs) else (theirs, ordered)
        extra = longer[len(shorter)] if len(longer) > len(shorter) else "?"
        first = f"{extra!r} is only in {'the run' if longer is theirs else 'this mapping'}"
    raise RunMismatchError(
        f"the run at {mailbox.url} has {stored.get('units')} units and this learner was given "
        f"{len(identifiers)} with a different set of identifiers (first difference: {first}); "
        "every learner must pass the same units mapping. To start a different job, use a new "
        "prefix in the URL"
    )
