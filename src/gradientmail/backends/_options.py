"""Taking mailbox URLs apart and checking backend options, for every backend.

* :func:`split_url` and :func:`split_store_url` parse ``scheme://location/path?options``,
  and :func:`file_url` writes the ``file://`` URL of a path (percent-encoded, so it
  round-trips);
* :func:`parse_options` checks a backend's options against the ones it accepts, and
  :func:`parse_bool`, :func:`positive_float` and :func:`positive` convert them;
* :func:`redact` is the one way a URL appears in a message: without user info or query;
* :func:`require` imports an optional SDK, or names the pip extra that brings it.

A backend's ``open`` classmethod uses these, so every backend parses and refuses the same
way. They are a stable API for plug-ins.
"""

from __future__ import annotations

import importlib
import math
import re
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple
from urllib.parse import parse_qsl, quote, unquote, urlsplit

from gradientmail._errors import ConfigurationError, InvalidKeyError, MissingDependencyError
from gradientmail._keys import validate_key

# C0 controls and DEL: never meaningful in a URL (RFC 3986), and urlsplit silently drops tab,
# CR and LF, which would open a different place than the one written.
_URL_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# What a path may carry unencoded (RFC 3986 pchar and "/"), besides letters and digits.
_PATH_SAFE = "/-._~!$&'()*+,;=:@"


@dataclass(frozen=True)
class SplitURL:
    """A mailbox URL taken apart. ``path`` has no leading ``/`` for object stores."""

    scheme: str
    netloc: str
    path: str
    query: dict[str, str]


def split_url(url: str) -> SplitURL:
    """Split ``url`` into scheme, location, path and query options.

    The location and path are percent-decoded exactly once, as RFC 3986 says; octets that
    are not UTF-8 decode to the surrogate escapes :func:`os.fsdecode` uses, so a file name
    in any encoding round-trips through :func:`file_url`. Control characters (tab, CR, LF,
    DEL and the other C0 codes) are refused, never silently dropped: in a URL they must be
    percent-encoded (``%09``).

    Raises:
        ConfigurationError: the URL is not a string, holds a control character, cannot be
            split (e.g. an unbalanced ``[``), has a fragment, or repeats an option.
    """
    if not isinstance(url, str) or not url:
        raise ConfigurationError(f"a mailbox URL must be a non-empty str, not {url!r}")
    control = _URL_CONTROL.search(url)
    if control:
        raise ConfigurationError(
            f"malformed mailbox URL {redact(url)!r}: it holds the control character "
            f"{control.group()!r} at index {control.start()}; percent-encode it "
            f"(%{ord(control.group()):02X})"
        )
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # e.g. "Invalid IPv6 URL", or a netloc that NFKC-normalizes badly
        raise ConfigurationError(f"malformed mailbox URL {redact(url)!r}: {exc}") from None
    if "#" in url:  # even an empty fragment: a '#' in a name must be written %23
        raise ConfigurationError(
            f"mailbox URL {redact(url)!r} must not contain a '#fragment'; write a '#' that "
            "belongs to a name as %23"
        )
    query: dict[str, str] = {}
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name in query:
            raise ConfigurationError(f"option {name!r} is given twice in {redact(url)!r}")
        query[name] = value
    return SplitURL(
        parts.scheme.lower(),
        unquote(parts.netloc, errors="surrogateescape"),
        unquote(parts.path, errors="surrogateescape"),
        query,
    )


def file_url(path: str) -> str:
    """The ``file://`` URL naming exactly the absolute ``path``: the inverse of :func:`split_url`.

    Every character that would mean something else in a URL (``%``, ``?``, ``#``, spaces,
    control characters, non-ASCII) is percent-encoded, so ``split_url(file_url(p)).path == p``
    for every absolute path ``p``, including names that are not UTF-8. A mailbox's ``url``
    is built this way, which is what makes a pickled mailbox reopen the same directory.
    """
    return "file://" + quote(path, safe=_PATH_SAFE, errors="surrogateescape")


def split_store_url(
    url: str, *, store: str, container: str, name: re.Pattern[str], name_rule: str, example: str
) -> tuple[str, str]:
    """Split an object-store URL ``scheme://CONTAINER/PREFIX`` into (container, prefix).

    The prefix comes back without a leading or trailing ``/`` (``""`` for none) and follows
    the key rules, so that ``prefix + "/" + key`` is a valid object name.

    Args:
        url: the URL, without its query string.
        store: the store's name for messages, e.g. ``"S3"``.
        container: what the store calls a container, e.g. ``"bucket"``.
        name: the pattern a container name must match in full.
        name_rule: the naming rule in words, for messages.
        example: an example URL phrase, e.g. ``"e.g. s3://my-bucket/run1"``.

    Raises:
        ConfigurationError: credentials in the URL (never echoed), no container, an invalid
            container name, or a prefix with an empty, ``.`` or ``..`` segment.
    """
    split = split_url(url)
    if "@" in split.netloc:
        raise ConfigurationError(
            f"{store} URLs must not carry credentials; use the SDK's standard credential "
            f"chain (environment variables, a profile or config file); {example}"
        )
    if not split.netloc:
        raise ConfigurationError(
            f"{store} URL {url!r} names no {container}; use "
            f"{split.scheme}://{container.upper()}/PREFIX, {example}"
        )
    if not name.fullmatch(split.netloc):
        raise ConfigurationError(
            f"invalid {container} name {split.netloc!r} in {url!r}: not a valid {store} "
            f"{container} name ({name_rule}); {example}"
        )
    # One leading "/" separates the prefix; one trailing "/" is conventional.
    prefix = split.path.removeprefix("/").removesuffix("/")
    if prefix and "" in prefix.split("/"):
        raise ConfigurationError(
            f"the prefix {prefix!r} in {url!r} has an empty segment ('//'); {example}"
        )
    if prefix:
        try:
            validate_key(prefix)
        except InvalidKeyError as exc:
            raise ConfigurationError(
                f"the prefix {prefix!r} in {url!r} is not valid: {exc.rule}; {example}"
            ) from None
    return split.netloc, prefix


def redact(url: str) -> str:
    """The URL without its query string, fragment or user info, for messages and logs.

    Query options and user info may hold secrets (an Azure key, a SAS token, a password),
    so every message that shows a URL shows it through this function.
    """
    if not isinstance(url, str):
        return repr(type(url).__name__)
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<malformed URL>"
    netloc = parts.netloc.rpartition("@")[2]
    return f"{parts.scheme}://{netloc}{parts.path}" if parts.scheme else parts.path


def positive(value: object, what: str, *, integer: bool = False, allow_none: bool = False) -> Any:
    """Return ``value`` if it is a positive number (an ``int`` with ``integer``), else raise.

    Args:
        value: the value to check; ``bool`` is refused although it is an ``int``.
        what: the option's name, for the message.
        integer: require an ``int``.
        allow_none: accept ``None`` (meaning "no limit") and return it.

    Raises:
        ConfigurationError: naming ``what``, what it must be, and the value given.
    """
    if value is None and allow_none:
        return None
    number = not isinstance(value, bool) and isinstance(value, int if integer else (int, float))
    if not number or not value > 0:  # type: ignore[operator]  # a number, checked just above
        kind = "int" if integer else "number"
        none = " or None" if allow_none else ""
        raise ConfigurationError(f"{what} must be a positive {kind}{none}, not {value!r}")
    return value


#: A lease longer than an hour is warned about: a dead learner's work would wait that long,
#: and it is most likely milliseconds passed as seconds (``lease=60_000``, 16.7 hours).
LONGEST_PLAUSIBLE_LEASE = 3_600.0


class LeaseMeaning(NamedTuple):
    """What a duration argument means, in the words its errors and warnings use."""

    forever: str
    """What an endless value would do."""
    choose: str
    """What to pass instead, with the default."""
    long: str
    """What a value of more than an hour does."""


#: ``lease=`` of the queue, the pipeline and the dataset.
QUEUE_LEASE = LeaseMeaning(
    forever="a learner that dies would hold its work forever",
    choose="the longest silence after which others may take its work over (60 is the default)",
    long="a learner that dies holds its work that long before others take it over",
)


def lease_seconds(value: object, what: str = "lease", meaning: LeaseMeaning = QUEUE_LEASE) -> float:
    """A lease duration: a positive, finite number of seconds, warned about above an hour.

    Raises:
        ConfigurationError: not a positive number, or not finite (``inf``, ``nan``).
    """
    number = float(positive(value, what))
    if not math.isfinite(number):
        raise ConfigurationError(
            f"{what} must be a finite number of seconds, not {value!r}: {meaning.forever}; "
            f"pass {meaning.choose}"
        )
    if number > LONGEST_PLAUSIBLE_LEASE:
        warnings.warn(
            f"{what}={value!r} seconds is more than an hour: {meaning.long}. {what} is in "
            f"seconds; if you meant milliseconds, pass {number / 1000:g}",
            UserWarning,
            stacklevel=3,
        )
    return number


def positive_float(value: Any) -> float:
    """An option converter: a positive number of seconds, from a number or its text."""
    number = float(value)
    if not number > 0:
        raise ValueError(f"must be a positive number, not {value!r}")
    return number


def parse_bool(value: object) -> bool:
    """Accept ``True``/``False`` or the strings ``true/false/1/0/yes/no/on/off``."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"expected a boolean (true/false), got {value!r}")


def parse_options(
    backend: str,
    given: Mapping[str, Any],
    accepted: Mapping[str, Callable[[Any], Any]],
    defaults: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Check and convert options for ``backend``.

    Args:
        backend: the scheme, for messages.
        given: the options the caller passed.
        accepted: option name → converter (called on the raw value; may raise ValueError).
        defaults: values for options not given.

    Raises:
        ConfigurationError: an unknown option (listing the accepted ones) or a bad value.
    """
    unknown = sorted(set(given) - set(accepted))
    if unknown:
        allowed = ", ".join(sorted(accepted)) or "none"
        raise ConfigurationError(
            f"unknown option(s) {', '.join(map(repr, unknown))} for {backend}:// mailboxes; "
            f"accepted options: {allowed}"
        )
    result = dict(defaults or {})
    for name, raw in given.items():
        try:
            result[name] = accepted[name](raw)
        except (TypeError, ValueError) as exc:
            raise ConfigurationError(
                f"option {name!r} for {backend}:// is invalid: {exc}"
            ) from None
    return result


def require(module: str, extra: str) -> Any:
    """Import an optional dependency, or raise ``MissingDependencyError`` naming the extra."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingDependencyError(module, extra) from exc
