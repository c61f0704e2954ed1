"""Where a shared model lives in a mailbox, and the head record that names its version.

Every key one shared model uses is named here, under ``exchange/{name}/``:

``layout``
    ``{"params": [[name, shape, dtype], ...], "numel", "wire", "rule", "parts"}``, created
    once with ``put_if_absent`` by the first learner. A learner whose model differs is
    refused, naming the first difference.
``head``
    The one record that is swapped (compare-and-swap). It names the current version, the
    fragments that hold it, the versions still kept, and a ledger entry per learner (see
    :class:`Head`). It never holds parameters, so it stays small: about 150 bytes a learner.
``data/{token}/{index:05d}``
    One version's values (the parameters, then the outer rule's state, in the wire dtype),
    cut into fragments of at most ``fragment_bytes``. Fragments are written before the head
    that names them and never change afterwards, so no reader sees a version half-written.
    ``token`` is ``{version:012d}-{random}``: the version the write would create, so a
    sweep can tell a write that can no longer become current (its version is at most the
    head's and the head does not name it) from one still in flight.

This module imports neither torch nor a cloud SDK: ``gradientmail status`` reads the head
through it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from gradientmail._keys import validate_segment
from gradientmail._record_codec import decode_record, encode_record
from gradientmail.backends._base import new_write_id

ROOT = "exchange/"


#: Each of a shared model's keys, after its ``base``.
_KEY_SUFFIXES = (("base", ""), ("layout", "layout"), ("head", "head"), ("data", "data/"))


@dataclass(frozen=True)
class Keys:
    """The keys of one shared model, named ``name``, all under ``base``: its ``layout``
    record, its ``head`` (the record swapped on each exchange), and the prefix of its
    versions' fragments, ``data``."""

    name: str
    base: str = field(init=False, repr=False)
    layout: str = field(init=False, repr=False)
    head: str = field(init=False, repr=False)
    data: str = field(init=False, repr=False)

    def __post_init__(self) -> None:
        validate_segment(self.name, "shared model name")
        base = f"{ROOT}{self.name}/"
        for attribute, suffix in _KEY_SUFFIXES:
            object.__setattr__(self, attribute, base + suffix)  # frozen: set once, here

    def fragment(self, token: str, index: int) -> str:
        return f"{self.data}{token}/{index:05d}"


def new_data_token(version: int) -> str:
    """A token for the fragments of a write that would create ``version``."""
    return f"{version:012d}-{new_write_id()[:16]}"


def token_version(token: str) -> int | None:
    """The version a data token was written for, or ``None`` for a foreign name."""
    number, _, rest = token.partition("-")
    return int(number) if number.isdigit() and rest else None


@dataclass
class LearnerEntry:
    """One learner's line in the head's ledger.

    ``seq`` counts the learner's exchanges applied so far: an exchange is applied exactly
    when the head's ``seq`` for its learner reached the exchange's number, which is how a
    lost response is settled. ``incarnation`` names the process that may apply next; a new
    process with the same learner id replaces it, and the old one is fenced.
    """

    seq: int = 0
    incarnation: str = ""
    staleness: int = 0
    applied_at: float = 0.0
    blocked_s: float = 0.0
    dropped: int = 0
    left: bool = False

    def to_record(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "inc": self.incarnation,
            "staleness": self.staleness,
            "at": round(self.applied_at, 3),
            "blocked_s": round(self.blocked_s, 4),
            "dropped": self.dropped,
            "left": self.left,
        }

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> LearnerEntry:
        return cls(
            seq=int(record.get("seq", 0)),
            incarnation=str(record.get("inc", "")),
            staleness=int(record.get("staleness", 0)),
            applied_at=float(record.get("at", 0.0)),
            blocked_s=float(record.get("blocked_s", 0.0)),
            dropped=int(record.get("dropped", 0)),
            left=bool(record.get("left", False)),
        )


@dataclass
class Head:
    """The swapped record: which version is current, where it is, and the ledger.

    ``history`` lists ``[version, token, fragments]`` for the versions kept, oldest first,
    the current one last. ``rule_state`` is the outer rule's small state (a counter).
    """

    version: int
    token: str
    fragments: int
    history: list[list[Any]]
    learners: dict[str, LearnerEntry] = field(default_factory=dict)
    rule_state: dict[str, Any] = field(default_factory=dict)

    def encode(self) -> bytes:
        return encode_record(
            {
                "version": self.version,
                "token": self.token,
                "fragments": self.fragments,
                "history": self.history,
                "learners": {k: v.to_record() for k, v in sorted(self.learners.items())},
                "rule_state": self.rule_state,
                "written_at": round(time.time(), 3),
            }
        )

    @classmethod
    def decode(cls, data: bytes, key: str) -> Head:
        """Parse a head record; raise ``InvalidDataError`` naming ``key`` if it is not one."""
        from gradientmail._errors import InvalidDataError

        record = decode_record(data)
        try:
            if record is None:
                raise ValueError("not a JSON object")
            return cls(
                version=int(record["version"]),
                token=str(record["token"]),
                fragments=int(record["fragments"]),
                history=[list(entry) for entry in record["history"]],
                learners={
                    str(k): LearnerEntry.from_record(v) for k, v in record["learners"].items()
                },
                rule_state=dict(record.get("rule_state") or {}),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise InvalidDataError(
                f"{key} is not a shared-model head record written by gradientmail; another "
                "program wrote under exchange/. Use another name= for the shared model, or "
                "another mailbox prefix"
            ) from exc

    def active_learners(self, now: float, lease: float) -> list[str]:
        """Learners that applied within ``lease`` seconds of ``now`` and have not left."""
        return [
            name
            for name, entry in self.learners.items()
            if not entry.left and now - entry.applied_at <= lease
        ]
