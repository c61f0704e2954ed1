"""What a pipeline over a mailbox stores, and under which key: one typed record per key.

Mailbox layout (one run per mailbox namespace; a new run uses a new URL)::

    pipeline                    Manifest: the declared producers and capacity (put_if_absent)
    producers/{id}/registered   Registration: who registered, created once (put_if_absent)
    producers/{id}/end          End: {status: done|failed|lost, count, error}, created once
    leases/producers/{id}       the producer's lease (gradientmail.patterns._leases.Lease)
    items/{id}/{seq}            the item's bytes, as put (put_if_absent)
    claims/{id}/{seq}           ItemClaim: the consumer that took the item (claim, read back),
                                swapped to delivered when its next() returns the item, or
                                taken over from a consumer that died before that
    leases/consumers/{id}       a consumer's lease (gradientmail.patterns._leases.Lease)
    aborted                     Aborted: why the pipeline was stopped, if it was

Every record is a JSON object, written by :func:`~gradientmail.patterns._claims.encode_record`
and read by :func:`~gradientmail.patterns._claims.decode_record`, the one codec of the
patterns. Reading bytes that are not the record a key should hold raises
:class:`~gradientmail._errors.PipelineError` naming the key and what is wrong, never a
``KeyError`` from deep inside a consumer.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, TypeVar

from gradientmail._errors import KeyNotFoundError, PipelineError
from gradientmail._record_codec import decode_record, encode_record
from gradientmail.mailbox import Mailbox
from gradientmail.patterns._workers import CarriedError

__all__ = [
    "ABORTED_KEY",
    "CLAIMED",
    "CONSUMER_LEASES",
    "DELIVERED",
    "FAILED",
    "MANIFEST_KEY",
    "PRODUCER_LEASES",
    "Aborted",
    "End",
    "ItemClaim",
    "Manifest",
    "Record",
    "Registration",
    "claim_key",
    "consumer_lease_key",
    "end_key",
    "exists",
    "item_key",
    "producer_keys",
    "producer_lease_key",
    "registered_key",
]

MANIFEST_KEY = "pipeline"
ABORTED_KEY = "aborted"
#: Producer ``p``'s lease is ``PRODUCER_LEASES + p`` (a prefix, as a LeaseWatcher takes).
PRODUCER_LEASES = "leases/producers/"
#: Consumer ``c``'s lease is ``CONSUMER_LEASES + c``.
CONSUMER_LEASES = "leases/consumers/"
#: Sequence numbers are zero-padded so that a producer's items list in order.
SEQ_DIGITS = 12


def registered_key(producer: str) -> str:
    """Where producer ``producer``'s :class:`Registration` lives."""
    return f"producers/{producer}/registered"


def producer_lease_key(producer: str) -> str:
    """Where producer ``producer``'s lease lives."""
    return PRODUCER_LEASES + producer


def end_key(producer: str) -> str:
    """Where producer ``producer``'s :class:`End` lives."""
    return f"producers/{producer}/end"


def consumer_lease_key(consumer: str) -> str:
    """Where consumer ``consumer``'s lease lives."""
    return CONSUMER_LEASES + consumer


def item_key(producer: str, seq: int) -> str:
    """Where item ``seq`` of ``producer`` lives (its bytes, as put)."""
    return f"items/{producer}/{seq:0{SEQ_DIGITS}d}"


def claim_key(producer: str, seq: int) -> str:
    """Where the :class:`ItemClaim` of item ``seq`` of ``producer`` lives."""
    return f"claims/{producer}/{seq:0{SEQ_DIGITS}d}"


def producer_keys(producer: str) -> tuple[str, ...]:
    """One key of each form that names ``producer``, for checking its length up front."""
    return (
        registered_key(producer),
        producer_lease_key(producer),
        end_key(producer),
        item_key(producer, 0),
        claim_key(producer, 0),
    )


def exists(mailbox: Mailbox, key: str) -> bool:
    """Whether ``key`` exists (a read: the Mailbox API has no cheaper existence check)."""
    try:
        mailbox.get(key)
    except KeyNotFoundError:
        return False
    return True


_R = TypeVar("_R", bound="Record")

#: The annotations a record's dataclass fields may have, as the checks they imply.
_KINDS: dict[str, tuple[type[Any], bool]] = {
    "str": (str, False),
    "int": (int, False),
    "float": (float, False),
    "str | None": (str, True),
}


def _field(fields: dict[str, Any], name: str, kind: type[Any], *, optional: bool = False) -> Any:
    """``fields[name]`` if it is a ``kind`` (``None`` or missing allowed with ``optional``).

    Raises:
        ValueError: naming the field, missing or of the wrong type.
    """
    value = fields.get(name)
    if value is None and optional:
        return None
    if isinstance(value, bool):
        ok = kind is bool  # an int in Python, never a count in a record
    elif kind is float:
        ok = isinstance(value, (int, float))  # JSON writes a whole float as an int
    else:
        ok = isinstance(value, kind)
    if not ok:
        missing = name not in fields
        raise ValueError(
            f"field {name!r} is missing"
            if missing
            else f"field {name!r} is not of type {kind.__name__}"
        )
    return value


@dataclass(frozen=True)
class Record:
    """A frozen dataclass stored as a JSON object: :meth:`to_bytes`, :meth:`from_bytes`.

    By default the JSON fields are the dataclass fields (``None`` left out), each checked
    against its annotation when read; a record whose JSON differs overrides :meth:`fields`
    and :meth:`from_fields`.
    """

    def fields(self) -> dict[str, Any]:
        """The record as JSON-friendly fields."""
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return {name: value for name, value in values.items() if value is not None}

    @classmethod
    def from_fields(cls: type[_R], fields: dict[str, Any]) -> _R:
        """Rebuild from :meth:`fields`.

        Raises:
            ValueError: naming a missing or malformed field.
        """
        values = {}
        for f in dataclasses.fields(cls):
            kind, optional = _KINDS[str(f.type)]
            values[f.name] = _field(fields, f.name, kind, optional=optional)
        return cls(**values)

    def to_bytes(self) -> bytes:
        """The bytes to store."""
        return encode_record(self.fields())

    @classmethod
    def from_bytes(cls: type[_R], data: bytes, key: str, where: str = "") -> _R:
        """Parse the bytes stored at ``key`` (in mailbox ``where``, for the message).

        Raises:
            PipelineError: the bytes are not this record, naming the key and the problem.
        """
        fields = decode_record(data)
        try:
            if fields is None:
                raise ValueError("not a JSON object")
            return cls.from_fields(fields)
        except ValueError as exc:
            place = f"{key!r} in {where}" if where else repr(key)
            raise PipelineError(
                f"{place} does not hold a pipeline {cls.__name__} record ({exc}); is this "
                "mailbox used by something else? Use a new, empty namespace per pipeline run"
            ) from None

    @classmethod
    def read(cls: type[_R], mailbox: Mailbox, key: str) -> _R | None:
        """The record stored at ``key``, or ``None`` if the key does not exist.

        Raises:
            PipelineError: the key holds something else (see :meth:`from_bytes`).
        """
        try:
            data = mailbox.get(key)
        except KeyNotFoundError:
            return None
        return cls.from_bytes(data, key, mailbox.url)


@dataclass(frozen=True)
class Manifest(Record):
    """The pipeline's declaration, created by the first handle and checked by the others."""

    KIND: ClassVar[str] = "gradientmail.pipeline"

    producers: tuple[str, ...]
    capacity: int
    version: int = 1

    def fields(self) -> dict[str, Any]:
        return {
            "kind": self.KIND,
            "version": self.version,
            "producers": list(self.producers),
            "capacity": self.capacity,
        }

    @classmethod
    def from_fields(cls, fields: dict[str, Any]) -> Manifest:
        if fields.get("kind") != cls.KIND:
            raise ValueError(f"its kind is {fields.get('kind')!r}, not {cls.KIND!r}")
        producers = _field(fields, "producers", list)
        if not all(isinstance(p, str) for p in producers):
            raise ValueError("field 'producers' is not a list of ids")
        return cls(
            tuple(producers), _field(fields, "capacity", int), _field(fields, "version", int)
        )


@dataclass(frozen=True)
class Registration(Record):
    """Who registered as a producer: created once, so a second registration is refused."""

    #: The host and process that registered, for the message refusing a second one.
    host: str
    pid: int
    #: Unique to this registration: the producer signs its end record with it.
    token: str


EndStatus = Literal["done", "failed", "lost"]
_STATUSES: tuple[EndStatus, ...] = ("done", "failed", "lost")


@dataclass(frozen=True)
class End(Record):
    """How a producer ended, and after how many items: the count carries the end.

    ``token`` is the producer's own registration token when it wrote the record itself
    (``done`` or ``failed``), and ``None`` when a consumer declared it ``lost``; a producer
    that finds an end record with another token knows it was fenced.
    """

    status: EndStatus
    count: int
    #: Who wrote it: the producer itself, or the consumer that declared it lost.
    by: str
    token: str | None
    #: The producer's exception, for ``failed`` (stored through ``CarriedError.to_record``).
    error: CarriedError | None = None
    #: For ``lost``: the lease duration its lease went unrenewed for (at least).
    silent_s: float | None = None

    def fields(self) -> dict[str, Any]:
        body = super().fields()
        body["token"] = self.token  # null for a consumer's ``lost``: never the producer's
        if self.error is not None:
            body["error"] = self.error.to_record()
        if self.silent_s is not None:
            body["silent_s"] = round(self.silent_s, 3)
        return body

    @classmethod
    def from_fields(cls, fields: dict[str, Any]) -> End:
        status = fields.get("status")
        if status not in _STATUSES:
            raise ValueError(f"its status is {status!r}, not one of {list(_STATUSES)}")
        error = fields.get("error")
        return cls(
            status,
            _field(fields, "count", int),
            _field(fields, "by", str),
            _field(fields, "token", str, optional=True),
            None if error is None else CarriedError.from_record(error),
            _field(fields, "silent_s", float, optional=True),
        )


@dataclass(frozen=True)
class Aborted(Record):
    """Why the pipeline stopped; ``producer`` names the failed producer that stopped it."""

    reason: str
    producer: str | None = None


#: An item claim's states: claimed (held, not yet returned by ``next()``), delivered
#: (returned by the owner's ``next()``), failed (``next()`` raised the item's decode error in
#: its place). Only a claimed item can be taken over.
CLAIMED = "claimed"
DELIVERED = "delivered"
FAILED = "failed"
_CLAIM_STATES = (CLAIMED, DELIVERED, FAILED)


@dataclass(frozen=True)
class ItemClaim(Record):
    """Which consumer holds an item, and whether its ``next()`` has returned it.

    Created by :func:`gradientmail.patterns._claims.claim_versioned` (the one claim
    mechanism, which reads the claim back), so its first fields are that function's. The
    owner swaps it to ``delivered`` (compare-and-swap) when its ``next()`` returns the item;
    another consumer swaps a ``claimed`` one to itself when the owner died first.
    """

    owner: str
    token: str
    claimed_at: float
    #: The owner's lease incarnation when it claimed (a restarted consumer id counts up).
    incarnation: int
    #: The owner's claim number: its claims and takeovers counted from 0 per incarnation.
    #: An owner returns its items in this order.
    n: int
    #: How many of its claims the owner had delivered when it made this one: each claim of
    #: this owner and incarnation numbered below it was delivered.
    delivered_before: int
    #: :data:`CLAIMED`, :data:`DELIVERED` or :data:`FAILED`.
    state: str
    #: The consumer this claim was taken over from, if it was.
    taken_from: str | None = None

    @classmethod
    def from_fields(cls, fields: dict[str, Any]) -> ItemClaim:
        claim = super().from_fields(fields)
        if claim.state not in _CLAIM_STATES:
            raise ValueError(f"its state is {claim.state!r}, not one of {list(_CLAIM_STATES)}")
        return claim

    @property
    def settled(self) -> bool:
        """Whether the owner's ``next()`` returned the item (or its error): never taken over."""
        return self.state != CLAIMED
