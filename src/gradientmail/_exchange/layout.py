"""Where a shared model lives in a mailbox, and the head record that names its version.

Every key one shared model uses is named here, under ``exchange/{name}/``:

``layout``
    ``{"params": [[name, shape, dtype], ...], "buffers": [...], "frozen": [names], "numel",
    "counts", "shared": {setting: value}}``, created once with ``put_if_absent`` by the first
    learner. ``shared`` holds the settings every learner must share (the wire dtype, the
    outer rule and its step, the staleness weight and bound, the activity window, whether
    buffers are shared); a learner whose model or settings differ is refused, naming the
    first difference. ``numel`` counts a version's fp32 values per part of the outer rule's
    state, ``counts`` its int64 values.
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

from dataclasses import dataclass, field
from typing import Any

from gradientmail._errors import ConfigurationError, InvalidDataError
from gradientmail._exchange.pace import LearnerPace
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


def start_over(key: str) -> str:
    """How to start over after the records of the shared model that owns ``key`` were
    damaged: the sentence the errors that refuse them end with."""
    base = "/".join(key.split("/")[:2]) + "/"
    return (
        "To start over, give the shared model another name=, or delete everything under "
        f"{base} (the training it held is lost)"
    )


def new_data_token(version: int) -> str:
    """A token for the fragments of a write that would create ``version``."""
    return f"{version:012d}-{new_write_id()[:16]}"


def token_version(token: str) -> int | None:
    """The version a data token was written for, or ``None`` for a foreign name."""
    number, _, rest = token.partition("-")
    return int(number) if number.isdigit() and rest else None


#: The settings an older layout record held at its top level, before ``shared``.
_LEGACY_SETTINGS = ("wire", "rule", "parts")


def shared_settings(layout: dict[str, Any]) -> dict[str, Any]:
    """The settings every learner of a shared model must share, as its layout records them."""
    settings = layout.get("shared")
    if isinstance(settings, dict):
        return settings
    return {name: layout[name] for name in _LEGACY_SETTINGS if name in layout}


#: What a wrapper puts before every parameter's name, leaving the parameters themselves as
#: they are: ``torch.compile`` (``_orig_mod.``), ``DistributedDataParallel`` and
#: ``DataParallel`` (``module.``). Models are compared without them, so one learner may
#: compile or wrap its model while another does not.
WRAPPER_PREFIXES = ("_orig_mod.", "module.")


def unwrapped(name: str) -> str:
    """``name`` without the prefixes that wrappers put before it."""
    while name.startswith(WRAPPER_PREFIXES):
        name = name.partition(".")[2]
    return name


def _plain(described: list[list[Any]]) -> list[list[Any]]:
    return [[unwrapped(name), *rest] for name, *rest in described]


def _first_difference(mine: list[list[Any]], shared: list[list[Any]], what: str) -> str:
    """The first tensor in which two descriptions differ, in words."""
    for index, (a, b) in enumerate(zip(mine, shared, strict=False)):
        if a != b:
            found = (
                f"{what} {index}: this model has {a[0]} {tuple(a[1])} {a[2]}, the shared "
                f"one {b[0]} {tuple(b[1])} {b[2]}"
            )
            if a[:2] == b[:2] and str(b[2]).startswith(("float", "bfloat")):  # the dtype only
                found += (
                    f" (hold the model in {b[2]} on every learner, model.to(torch.{b[2]}); "
                    f"torch.autocast trains in lower precision with {b[2]} parameters)"
                )
            return found
    return f"this model has {len(mine)} {what}s, the shared one {len(shared)}"


def check_model(stored: dict[str, Any], mine: dict[str, Any], where: str) -> None:
    """The one check that a model matches a shared model's layout record: its parameters,
    then its shared buffers, each by name (without a wrapper's prefix), shape and dtype.

    Raises:
        ConfigurationError: names, shapes or dtypes differ, naming the first difference.
    """
    for field_name, what in (("params", "parameter"), ("buffers", "buffer")):
        shared, here = _plain(stored.get(field_name) or []), _plain(mine[field_name])
        if shared != here:
            difference = _first_difference(here, shared, what)
            raise ConfigurationError(
                f"this model does not match {where}: {difference}. Pass the same model, or "
                "another name= for a second shared model"
            )


def check_layout(stored: dict[str, Any], mine: dict[str, Any], where: str) -> None:
    """Check a joining learner's layout against the stored one: the settings every learner
    must share (``mine["shared"]``, each one compared where the stored record has it),
    then the model.

    Raises:
        ConfigurationError: naming the first difference, and both values of a setting.
    """
    settings = shared_settings(stored)
    for name, value in mine["shared"].items():
        if name in settings and settings[name] != value:
            raise ConfigurationError(
                f"{where} was started with {name}={settings[name]!r}, this learner asks for "
                f"{name}={value!r}; every learner must use the same {name}"
            )
    check_model(stored, mine, where)


def frozen_difference(stored: dict[str, Any], mine: dict[str, Any]) -> str | None:
    """In words, the parameters frozen (``requires_grad=False``) here but not in the learner
    that started the shared model, and the reverse; ``None`` when they agree."""
    if "frozen" not in stored:
        return None  # a layout from before frozen parameters were recorded
    here = {unwrapped(name) for name in mine["frozen"]}
    there = {unwrapped(name) for name in stored["frozen"]}
    parts = []
    if here - there:
        parts.append(
            f"{sorted(here - there)} frozen here but trained by the learner that started it: "
            "the others' exchanges still move them on this learner"
        )
    if there - here:
        parts.append(
            f"{sorted(there - here)} trained here but frozen by the learner that started "
            "it: this learner's exchanges move them for every learner"
        )
    return "; ".join(parts) or None


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
    #: The learner's pace when it last exchanged (its batch, seconds per sample, every).
    pace: LearnerPace = field(default_factory=lambda: LearnerPace(0, 0.0, 0))

    def to_record(self) -> dict[str, Any]:
        return {
            "pace": [self.pace.batch, self.pace.seconds_per_sample, self.pace.every],
            "gsq": self.pace.grad_square,
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
            pace=_pace(record.get("pace"), record.get("gsq")),
        )


def _pace(record: Any, grad_square: Any) -> LearnerPace:
    """A ledger entry's pace; an entry written before paces were recorded has none, and one
    written before gradients were measured no mean square (it stays out of the fit)."""
    if not isinstance(record, list) or len(record) != 3:
        return LearnerPace(0, 0.0, 0)
    batch, seconds_per_sample, every = record
    square = float(grad_square) if isinstance(grad_square, (int, float)) else 0.0
    return LearnerPace(int(batch), float(seconds_per_sample), int(every), square)


@dataclass
class Head:
    """The swapped record: which version is current, where it is, and the ledger.

    ``history`` lists ``[version, token, fragments]`` for the versions kept, oldest first,
    the current one last. ``rule_state`` is the outer rule's small state (a counter).
    ``fragment_size`` is the bytes of each of the version's fragments but the last (0 in a
    head written before it was recorded). ``written_at`` and ``written_by`` say who swapped
    it in and when, by that learner's clock. Fields are encoded by name: a field added
    later decodes to its default from an older head.
    """

    version: int
    token: str
    fragments: int
    history: list[list[Any]]
    learners: dict[str, LearnerEntry] = field(default_factory=dict)
    rule_state: dict[str, Any] = field(default_factory=dict)
    fragment_size: int = 0
    written_at: float = 0.0
    written_by: str = ""

    def encode(self) -> bytes:
        return encode_record(
            {
                "version": self.version,
                "token": self.token,
                "fragments": self.fragments,
                "fragment_size": self.fragment_size,
                "history": self.history,
                "learners": {k: v.to_record() for k, v in sorted(self.learners.items())},
                "rule_state": self.rule_state,
                "written_at": round(self.written_at, 3),
                "written_by": self.written_by,
            }
        )

    @classmethod
    def decode(cls, data: bytes, key: str) -> Head:
        """Parse a head record.

        Raises:
            InvalidDataError: naming ``key``, when it is not a head record, or when its
                version is not the one its data was written for (it was edited or set back).
        """
        record = decode_record(data)
        try:
            if record is None:
                raise ValueError("not a JSON object")
            head = cls(
                version=int(record["version"]),
                token=str(record["token"]),
                fragments=int(record["fragments"]),
                history=[list(entry) for entry in record["history"]],
                learners={
                    str(k): LearnerEntry.from_record(v) for k, v in record["learners"].items()
                },
                rule_state=dict(record.get("rule_state") or {}),
                fragment_size=int(record.get("fragment_size", 0)),
                written_at=float(record.get("written_at", 0.0)),
                written_by=str(record.get("written_by", "")),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise InvalidDataError(
                f"{key} is not a shared-model head record written by gradientmail; another "
                "program wrote under exchange/. Use another name= for the shared model, or "
                "another mailbox prefix"
            ) from exc
        if token_version(head.token) != head.version:
            raise InvalidDataError(
                f"{key} names version {head.version}, but its data {head.token} was written "
                f"for version {token_version(head.token)}: the head was edited or set back. "
                f"{start_over(key)}"
            )
        return head

    def active_learners(self, now: float, window: float) -> list[str]:
        """Learners that applied within ``window`` seconds of ``now`` and have not left."""
        return [
            name
            for name, entry in self.learners.items()
            if not entry.left and now - entry.applied_at <= window
        ]
