"""Key rules, checked in one place for every backend.

A key is a non-empty ``str`` of at most 1024 bytes in UTF-8, made of ``/``-separated
segments, without control characters or backslashes (Azure Blob Storage and some S3 servers
read ``\\`` as ``/``, so such keys could not behave the same everywhere). The same rules
hold on every backend, so code moves from ``file://`` to ``s3://`` unchanged. Each
rejection raises :class:`~gradientmail._errors.InvalidKeyError` whose ``rule`` names the rule
broken.

Identifiers that become one segment of a key (learner, producer, consumer and unit ids)
follow :func:`validate_segment`: the key rule, without ``/``. It is the only ID rule in
gradientmail, so a name valid for a learner is valid for a producer too.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from gradientmail._errors import InvalidKeyError

__all__ = [
    "MAX_KEY_BYTES",
    "validate_key",
    "validate_prefix",
    "validate_segment",
    "validate_segments",
]

MAX_KEY_BYTES = 1024

# C0 controls, DEL and C1 controls. Object stores and filesystems treat these differently
# (S3 XML listings cannot carry some of them at all), so no backend accepts them.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# A segment of only these ASCII characters, and short, passes every rule below (the common
# case: a learner checks each of 100,000 unit identifiers at start).
_PLAIN_SEGMENT = re.compile(r"[A-Za-z0-9_.,:;=@+~-]{1,255}")
# Many such segments, one per line: the fast path of :func:`validate_segments`.
_PLAIN_LINES = re.compile(r"[A-Za-z0-9_.,:;=@+~-]{1,255}(?:\n[A-Za-z0-9_.,:;=@+~-]{1,255})*")


def _check_text(value: object, what: str, max_bytes: int = MAX_KEY_BYTES) -> str:
    if not isinstance(value, str):
        raise InvalidKeyError(value, f"a {what} must be a str, not {type(value).__name__}")
    match = _CONTROL.search(value)
    if match:
        raise InvalidKeyError(
            value,
            f"a {what} must not contain control characters "
            f"(found {match.group()!r} at index {match.start()})",
        )
    if "\\" in value:
        # Azure Blob Storage and SeaweedFS read a backslash as '/'; a key that means one object
        # on one store and another elsewhere would break "same keys, same behaviour".
        raise InvalidKeyError(
            value, f"a {what} must not contain a backslash ('\\\\'); use '/' to separate segments"
        )
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise InvalidKeyError(
            value, f"a {what} must be encodable as UTF-8 ({exc.reason})"
        ) from None
    if size > max_bytes:
        why = ""
        if max_bytes < MAX_KEY_BYTES:
            why = (
                f"; the store limits object names to {MAX_KEY_BYTES} bytes and this mailbox's "
                f"prefix takes {MAX_KEY_BYTES - max_bytes} of them"
            )
        raise InvalidKeyError(
            value, f"a {what} must be at most {max_bytes} bytes in UTF-8 (this one is {size}){why}"
        )
    if value.startswith("/"):
        raise InvalidKeyError(value, f"a {what} must not start with '/'")
    return value


def validate_key(key: object, max_bytes: int = MAX_KEY_BYTES) -> str:
    """Return ``key`` unchanged if it is a valid key, else raise ``InvalidKeyError``.

    ``max_bytes`` is lower than 1024 for an object-store mailbox under a prefix, because the
    store's 1024-byte limit applies to the prefix and key together.

    Raises:
        InvalidKeyError: naming the rule broken: not a str, empty, over 1024 bytes,
            not UTF-8, a leading ``/``, an empty segment, a ``.`` or ``..`` segment,
            a control character, or a backslash.
    """
    if key == "":
        raise InvalidKeyError(key, "a key must not be empty")
    text = _check_text(key, "key", max_bytes)
    for index, segment in enumerate(text.split("/")):
        if segment == "":
            raise InvalidKeyError(
                text,
                f"a key must not have an empty segment (segment {index}: '//' or trailing '/')",
            )
        if segment in (".", ".."):
            raise InvalidKeyError(text, f"a key must not have a {segment!r} segment")
    return text


def validate_prefix(prefix: object) -> str:
    """Return ``prefix`` unchanged if it can prefix a valid key, else raise ``InvalidKeyError``.

    A prefix is a plain string prefix (``"a/"`` and ``"ab"`` are both fine, and ``""`` lists
    everything). It follows the key rules that any prefix of a valid key follows.
    """
    if prefix == "":
        return ""
    return _check_text(prefix, "prefix")


def validate_segment(value: object, what: str) -> str:
    """Return ``value`` if it can be one key segment, else raise ``InvalidKeyError`` naming it.

    A segment is a non-empty ``str`` without ``/`` that is a valid key on its own: no
    control characters or backslash, not ``.`` or ``..``, at most 1024 bytes in UTF-8.
    Letters outside ASCII are fine (``nœud-1``).

    Args:
        value: the identifier to check.
        what: what it names, for the message (``"learner id"``, ``"producer id"``).
    """
    if isinstance(value, str) and _PLAIN_SEGMENT.fullmatch(value) and value not in (".", ".."):
        return value
    if not isinstance(value, str):
        raise InvalidKeyError(value, f"a {what} must be a str, not {type(value).__name__}")
    if "/" in value:
        raise InvalidKeyError(
            value, f"a {what} must be one key segment, without '/'; replace it, e.g. with '-'"
        )
    try:
        validate_key(value)
    except InvalidKeyError as exc:
        raise InvalidKeyError(value, f"a {what} must be a valid key segment: {exc.rule}") from None
    return value


def validate_segments(values: Iterable[object], what: str) -> list[str]:
    """Check many identifiers with :func:`validate_segment`; return them as a list, in order.

    Same rule and same errors (the first invalid one is named). Plain ASCII identifiers are
    checked together at C speed: a learner checks every unit identifier of its epoch at
    start, 100,000 of them in a few milliseconds.
    """
    checked = list(values)
    try:
        joined = "\n".join(checked)  # type: ignore[arg-type]  # a non-str raises TypeError
    except TypeError:
        joined = None
    if (
        joined is not None
        and _PLAIN_LINES.fullmatch(joined)
        and joined.count("\n") == len(checked) - 1
    ):
        lines = f"\n{joined}\n"
        if "\n.\n" not in lines and "\n..\n" not in lines:
            return checked  # type: ignore[return-value]  # every item is a plain str
    return [validate_segment(value, what) for value in checked]
